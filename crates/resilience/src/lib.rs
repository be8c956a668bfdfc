//! weir-resilience
