//! defects
