//! Many scenarios in one invocation: side by side on this host (`run --jobs N`), or as Ray jobs
//! on a cluster (`run --executor ray`), with one combined verdict (`OUT/index.md`,
//! `OUT/index.html`, `OUT/junit.xml`). See docs/scale-out.md.

pub(crate) mod bundle;
pub(crate) mod index;
pub(crate) mod local;
pub mod ray;
pub mod ray_auth;

pub(crate) use crate::model::slot::{Slot, SLOT};
