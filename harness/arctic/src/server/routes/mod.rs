//! The routes by family, and the table that maps each path to its handler.

mod jobs;
mod sampling;
mod training;

use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;

use super::Shared;

/// Every route of the Arctic API, as the real server spells it, and the rlharness extension
/// `/weight-digest`.
pub(super) fn table() -> Router<Arc<Shared>> {
    Router::new()
        .route("/health", get(jobs::health))
        .route("/initialize", post(jobs::initialize))
        .route("/job/{job_id}", get(jobs::job_route))
        .route("/status", get(jobs::status))
        .route("/destroy", post(jobs::destroy))
        .route("/forward-backward", post(training::forward_backward))
        .route("/forward", post(training::forward))
        .route("/step", post(training::step))
        .route("/save", post(training::save))
        .route("/load-checkpoint", post(training::load_checkpoint))
        .route("/sleep-training", post(training::sleep_training))
        .route("/wake-training", post(training::wake_training))
        .route(
            "/empty-training-cache",
            post(training::empty_training_cache),
        )
        .route("/sleep-log-prob", post(training::sleep_log_prob))
        .route("/wake-log-prob", post(training::wake_log_prob))
        .route("/generate", post(sampling::generate))
        .route("/log-probs", post(sampling::log_probs))
        .route("/sleep-inference", post(sampling::sleep_inference))
        .route("/wake-inference", post(sampling::wake_inference))
        .route("/reset-prefix-cache", post(sampling::reset_prefix_cache))
        .route("/operation", post(sampling::operation))
        .route("/weight-sync", post(sampling::weight_sync))
        .route("/weight-norm", post(sampling::weight_norm))
        // Not the real server's: an rlharness extension (`wire::digest`).
        .route(
            crate::wire::digest::WEIGHT_DIGEST_ROUTE,
            post(sampling::weight_digest),
        )
}
