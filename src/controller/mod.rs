//! The controller: the TenantRepository and CDTarget reconcilers (being built; see the issue
//! notes). What is here is the pure part they share.

pub mod cdtarget;
pub mod conditions;
