//! Many scenarios in one invocation: side by side on this host (`run --jobs N`), or as Ray jobs
//! on a cluster (`run --executor ray`), with one combined verdict (`OUT/index.md`,
//! `OUT/index.html`, `OUT/junit.xml`). See docs/scale-out.md.

pub mod bundle;
pub mod index;
pub mod local;
pub mod ray;

pub use crate::slot::{current_slot, Slot, SLOT};
