//! The libtorch engine (feature `torch`).
