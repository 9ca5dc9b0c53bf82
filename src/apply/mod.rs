//! Applying a tenant's set: what goes into the inventory, and what leaves the cluster when it
//! leaves Git. The plan is data computed by pure functions; the controller executes it.

pub mod discovery;
pub mod drift;
pub mod inventory;
pub mod server_side;

pub use inventory::{entry_of, inventory_of, prune_plan};
