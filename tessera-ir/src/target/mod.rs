//! Target IR: code for real machines. Today: PTX text for NVIDIA GPUs.

pub mod ptx;
