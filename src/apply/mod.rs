//! Everything the controller writes, and what it decides about tenant sets: what goes into the
//! inventory and what leaves the cluster when it leaves Git ([`inventory`], pure), which objects
//! drifted ([`drift`], pure), what the API server said when it refused an object
//! ([`refusal`], pure), which kinds the cluster serves ([`discovery`]), how tenant objects
//! are applied as the tenant ([`server_side`]), what this process applied last ([`applied`]),
//! and the one executor of every write ([`writer`]).

pub mod applied;
pub mod discovery;
pub(crate) mod drift;
pub(crate) mod inventory;
pub(crate) mod keda;
pub mod refusal;
pub mod server_side;
pub mod writer;

pub use inventory::{entry_of, inventory_of, prune_plan};
pub use writer::{Done, Write, WriteError, Writer};
