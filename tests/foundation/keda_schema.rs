//! keda_schema
