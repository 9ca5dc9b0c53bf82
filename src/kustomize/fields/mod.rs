//! The transformers that change fields but not names: labels, annotations, images, replicas.
//!
//! SKELETON (issue #15, being written): the fields slice replaces the bodies.

pub mod annotations;
pub mod images;
pub mod labels;
pub mod replicas;
