//! crds
