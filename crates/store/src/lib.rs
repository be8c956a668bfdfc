//! weir-store
