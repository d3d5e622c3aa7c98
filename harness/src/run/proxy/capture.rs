//! The bodies that stream through the proxy: they pass every frame on untouched and keep only
//! what the record needs (the DSSST1 header, or a JSON body up to a cap), count bytes, enforce
//! the body limit and, for responses, the time limit.

use std::future::Future as _;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use serde_json::{json, Value};

use rlharness_arctic::wire::dssst1;

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// JSON bodies larger than this are recorded as `{"bytes": n, "truncated": true}`.
pub(crate) const JSON_RECORD_CAP: usize = 1024 * 1024;

/// What to keep of a body for its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyKind {
    /// `application/octet-stream`: a DSSST1 frame; keep its header only.
    Frame,
    /// Anything else: kept up to [`JSON_RECORD_CAP`] and read as JSON if it parses.
    Other,
}

impl BodyKind {
    pub(crate) fn from_content_type(ct: Option<&str>) -> BodyKind {
        match ct {
            Some(ct) if ct.contains("application/octet-stream") => BodyKind::Frame,
            _ => BodyKind::Other,
        }
    }
}

/// The part of a body kept for the record, shared between the streaming body and the exchange.
#[derive(Debug)]
pub(crate) struct Capture {
    kind: BodyKind,
    content_type: Option<String>,
    prefix: Vec<u8>,
    /// Bytes of prefix wanted; grows from 8 to the header extent for a frame.
    want: usize,
    pub(crate) total: u64,
    limit: u64,
    pub(crate) over_limit: bool,
    pub(crate) complete: bool,
    /// Why the stream ended early, if it did.
    pub(crate) error: Option<String>,
    /// The whole body, only when a cassette is recorded (see [`Capture::keep_whole`]).
    whole: Option<Vec<u8>>,
}

pub(crate) type SharedCapture = Arc<Mutex<Capture>>;

/// Lock that survives a panicked holder: a capture is plain data and stays usable.
pub(crate) fn lock(c: &SharedCapture) -> MutexGuard<'_, Capture> {
    c.lock().unwrap_or_else(|p| p.into_inner())
}

impl Capture {
    pub(crate) fn new(content_type: Option<&str>, limit: u64) -> SharedCapture {
        let kind = BodyKind::from_content_type(content_type);
        Arc::new(Mutex::new(Capture {
            kind,
            content_type: content_type.map(str::to_string),
            prefix: Vec::new(),
            want: match kind {
                BodyKind::Frame => 8,
                BodyKind::Other => JSON_RECORD_CAP + 1,
            },
            total: 0,
            limit,
            over_limit: false,
            complete: false,
            error: None,
            whole: None,
        }))
    }

    /// Keep every byte of the body, not just what the record needs: for a cassette. Off by
    /// default, so the streaming path holds at most a frame header or a capped JSON body.
    pub(crate) fn keep_whole(&mut self) {
        self.whole.get_or_insert_with(Vec::new);
    }

    /// The whole body kept so far (empty unless [`Capture::keep_whole`] was called).
    pub(crate) fn take_whole(&mut self) -> Vec<u8> {
        self.whole.take().unwrap_or_default()
    }

    pub(crate) fn content_type(&self) -> Option<&str> {
        self.content_type.as_deref()
    }

    pub(crate) fn is_frame(&self) -> bool {
        self.kind == BodyKind::Frame
    }

    /// Account one data frame; false once the body is over its limit.
    fn take(&mut self, data: &[u8]) -> bool {
        self.total += data.len() as u64;
        if self.total > self.limit {
            self.over_limit = true;
            return false;
        }
        if let Some(w) = &mut self.whole {
            w.extend_from_slice(data);
        }
        let mut rest = data;
        while self.prefix.len() < self.want && !rest.is_empty() {
            let n = (self.want - self.prefix.len()).min(rest.len());
            self.prefix.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
            if self.kind == BodyKind::Frame && self.want == 8 && self.prefix.len() == 8 {
                // An unreadable length keeps just these 8 bytes; the summary says why.
                self.want = dssst1::header_extent(&self.prefix).unwrap_or(8);
            }
        }
        true
    }

    /// The body as the record shows it (see the module docs of `proxy`).
    pub(crate) fn summary(&self) -> Value {
        if self.total == 0 && self.error.is_none() {
            return Value::Null;
        }
        let mut out = json!({"bytes": self.total});
        let o = out.as_object_mut().expect("json! object literal");
        if !self.complete {
            o.insert("complete".into(), false.into());
        }
        match self.kind {
            BodyKind::Frame => match dssst1::header_summary(&self.prefix) {
                Ok(tree) => {
                    o.insert("dssst1".into(), tree);
                    // The header reads, but the body must also be as long as it announces:
                    // a truncated frame does not decode, and the record says so.
                    match dssst1::frame_len(&self.prefix) {
                        Ok(want) if self.complete && want as u64 != self.total => {
                            o.insert(
                                "dssst1_error".into(),
                                format!(
                                    "not a valid DSSST1 safetensors payload: the header announces a {want}-byte frame, the body has {} bytes",
                                    self.total
                                )
                                .into(),
                            );
                        }
                        Ok(_) => {}
                        Err(e) => {
                            o.insert("dssst1_error".into(), e.to_string().into());
                        }
                    }
                }
                Err(e) => {
                    o.insert("dssst1_error".into(), e.to_string().into());
                }
            },
            BodyKind::Other if self.total > JSON_RECORD_CAP as u64 => {
                o.insert("truncated".into(), true.into());
            }
            // Python peers may write NaN/Infinity: kept as `{"$float": ...}`, never `null`.
            BodyKind::Other => {
                match rlharness_arctic::wire::api::parse_json_lenient(&self.prefix) {
                    Ok(v) if self.complete => {
                        o.insert("json".into(), v);
                    }
                    _ => {
                        if let Some(ct) = &self.content_type {
                            o.insert("content_type".into(), ct.clone().into());
                        }
                        if let Ok(text) = std::str::from_utf8(&self.prefix) {
                            let cut: String = text.chars().take(512).collect();
                            o.insert("text".into(), cut.into());
                        }
                    }
                }
            }
        }
        out
    }

    /// The whole body as JSON, if it was complete, small enough and JSON.
    pub(crate) fn json(&self) -> Option<Value> {
        if self.kind != BodyKind::Other || !self.complete || self.total > JSON_RECORD_CAP as u64 {
            return None;
        }
        rlharness_arctic::wire::api::parse_json_lenient(&self.prefix).ok()
    }
}

/// Error a tee body ends with when the proxy cuts it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CutReason {
    #[error("body exceeds the limit of {0} bytes")]
    OverLimit(u64),
    #[error("upstream body stalled past the {0:.1} s request time-out")]
    TimedOut(f64),
}

/// A body that forwards `inner` frame by frame, recording into a [`Capture`].
pub(crate) struct TeeBody<B: Body> {
    inner: B,
    capture: SharedCapture,
    deadline: Option<(Pin<Box<tokio::time::Sleep>>, f64)>,
    /// Called once when the stream ends, fails or is dropped (the exchange's record).
    on_end: Option<Box<dyn FnOnce() + Send + Sync>>,
    done: bool,
}

impl<B: Body> TeeBody<B> {
    pub(crate) fn new(inner: B, capture: SharedCapture) -> Self {
        TeeBody {
            inner,
            capture,
            deadline: None,
            on_end: None,
            done: false,
        }
    }

    /// Cut the body when `deadline` passes before it ends.
    pub(crate) fn with_deadline(mut self, deadline: tokio::time::Instant, limit_s: f64) -> Self {
        self.deadline = Some((Box::pin(tokio::time::sleep_until(deadline)), limit_s));
        self
    }

    pub(crate) fn on_end(mut self, f: impl FnOnce() + Send + Sync + 'static) -> Self {
        self.on_end = Some(Box::new(f));
        self
    }

    fn finish(&mut self, error: Option<String>) {
        if self.done {
            return;
        }
        self.done = true;
        {
            let mut c = lock(&self.capture);
            if error.is_none() {
                c.complete = true;
            } else if c.error.is_none() {
                c.error = error;
            }
        }
        if let Some(f) = self.on_end.take() {
            f();
        }
    }
}

impl<B: Body> Drop for TeeBody<B> {
    fn drop(&mut self) {
        if self.inner.is_end_stream() {
            self.finish(None); // an empty body is never polled
        } else {
            self.finish(Some(
                "stream dropped before its end (peer went away)".into(),
            ));
        }
    }
}

impl<B> Body for TeeBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        let frame = match polled {
            Poll::Pending => {
                if let Some((sleep, limit_s)) = &mut this.deadline {
                    ready!(sleep.as_mut().poll(cx));
                    let reason = CutReason::TimedOut(*limit_s);
                    this.finish(Some(reason.to_string()));
                    return Poll::Ready(Some(Err(reason.into())));
                }
                return Poll::Pending;
            }
            Poll::Ready(f) => f,
        };
        match frame {
            None => {
                this.finish(None);
                Poll::Ready(None)
            }
            Some(Err(e)) => {
                let e: BoxError = e.into();
                this.finish(Some(e.to_string()));
                Poll::Ready(Some(Err(e)))
            }
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    let mut c = lock(&this.capture);
                    if !c.take(data) {
                        let reason = CutReason::OverLimit(c.limit);
                        drop(c);
                        this.finish(Some(reason.to_string()));
                        return Poll::Ready(Some(Err(reason.into())));
                    }
                }
                // A body with a length is over once that many bytes passed; its reader may
                // never poll for the end, so record completion now.
                if this.inner.is_end_stream() {
                    this.finish(None);
                }
                Poll::Ready(Some(Ok(frame)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use rlharness_arctic::wire::{encode, Node, Tensor};

    async fn pump(chunks: Vec<Bytes>, ct: Option<&str>, limit: u64) -> (SharedCapture, bool) {
        let cap = Capture::new(ct, limit);
        let stream = futures_util::stream::iter(
            chunks
                .into_iter()
                .map(|c| Ok::<_, std::io::Error>(Frame::data(c))),
        );
        let body = TeeBody::new(http_body_util::StreamBody::new(stream), cap.clone());
        let ok = body.collect().await.is_ok();
        (cap, ok)
    }

    #[tokio::test]
    async fn frame_header_is_kept_across_chunk_boundaries() {
        let root = Node::dict([
            (
                "ids",
                Node::from(Tensor::from_i64([4, 256], &[7; 1024]).unwrap()),
            ),
            ("meta", Node::json(json!({"lr": 1e-6}))),
        ]);
        let bytes = encode(&root).unwrap();
        let chunks: Vec<Bytes> = bytes.chunks(5).map(Bytes::copy_from_slice).collect();
        let (cap, ok) = pump(chunks, Some("application/octet-stream"), u64::MAX).await;
        assert!(ok);
        let c = lock(&cap);
        assert!(
            c.prefix.len() < bytes.len() / 4,
            "kept {} of {}",
            c.prefix.len(),
            bytes.len()
        );
        let s = c.summary();
        assert_eq!(s["bytes"], bytes.len());
        assert_eq!(s["dssst1"], root.summary());
    }

    #[tokio::test]
    async fn json_is_recorded_and_huge_json_truncated() {
        let (cap, _) = pump(
            vec![
                Bytes::from_static(b"{\"a\":"),
                Bytes::from_static(b"[1,2]}"),
            ],
            Some("application/json"),
            100,
        )
        .await;
        assert_eq!(
            lock(&cap).summary(),
            json!({"bytes": 11, "json": {"a": [1, 2]}})
        );
        assert_eq!(lock(&cap).json(), Some(json!({"a": [1, 2]})));
        let big = format!("[{}0]", "0,".repeat(JSON_RECORD_CAP));
        let (cap, _) = pump(vec![Bytes::from(big.clone())], None, u64::MAX).await;
        assert_eq!(
            lock(&cap).summary(),
            json!({"bytes": big.len(), "truncated": true})
        );
    }

    #[tokio::test]
    async fn over_limit_cuts_the_stream() {
        let (cap, ok) = pump(
            vec![Bytes::from_static(b"12345"), Bytes::from_static(b"678")],
            None,
            6,
        )
        .await;
        assert!(!ok);
        let c = lock(&cap);
        assert!(c.over_limit);
        assert!(c
            .error
            .as_deref()
            .unwrap_or("")
            .contains("limit of 6 bytes"));
    }

    #[tokio::test]
    async fn whole_bodies_are_kept_only_when_asked() {
        let body = vec![Bytes::from_static(b"{\"a\":"), Bytes::from_static(b"1}")];
        let (cap, _) = pump(body.clone(), Some("application/json"), u64::MAX).await;
        assert!(
            lock(&cap).take_whole().is_empty(),
            "the streaming default keeps nothing extra"
        );

        let cap = Capture::new(Some("application/octet-stream"), u64::MAX);
        lock(&cap).keep_whole();
        let stream = futures_util::stream::iter(
            body.into_iter()
                .map(|c| Ok::<_, std::io::Error>(Frame::data(c))),
        );
        let tee = TeeBody::new(http_body_util::StreamBody::new(stream), cap.clone());
        assert!(tee.collect().await.is_ok());
        assert_eq!(lock(&cap).take_whole(), b"{\"a\":1}");
    }

    /// A truncated frame is recorded with its decode failure (its header still describes it),
    /// a tuple keeps its tag, a NaN stays apart from null.
    #[test]
    fn truncated_frames_tuples_and_nan_are_recorded_faithfully() {
        use rlharness_arctic::wire::{encode, pyjson, Node, Tensor};
        let root = Node::dict([
            ("x", Node::from(Tensor::from_f32([4], &[1.0; 4]).unwrap())),
            ("pair", Node::Tuple(vec![Node::json(1), Node::json("a")])),
            ("loss", Node::json(pyjson::float(f64::NAN))),
            ("none", Node::json(Value::Null)),
        ]);
        let frame = encode(&root).unwrap();
        let record = |bytes: &[u8]| {
            let cap = Capture::new(Some("application/octet-stream"), u64::MAX);
            let mut c = lock(&cap);
            assert!(c.take(bytes));
            c.complete = true;
            c.summary()
        };
        let whole = record(&frame);
        assert!(whole.get("dssst1_error").is_none(), "{whole}");
        assert_eq!(whole["dssst1"]["pair"], json!({"$tuple": [1, "a"]}));
        assert_eq!(whole["dssst1"]["loss"], json!({"$float": "NaN"}));
        assert_eq!(whole["dssst1"]["none"], Value::Null);
        let cut = record(&frame[..frame.len() - 3]);
        assert!(
            cut["dssst1_error"]
                .as_str()
                .unwrap_or_default()
                .contains("the body has"),
            "{cut}"
        );
        assert_eq!(cut["dssst1"]["x"], json!({"dtype": "F32", "shape": [4]}));
        let json_body = Capture::new(Some("application/json"), u64::MAX);
        let mut c = lock(&json_body);
        assert!(c.take(br#"{"grad_norm": NaN, "lr": null}"#));
        c.complete = true;
        assert_eq!(
            c.summary()["json"],
            json!({"grad_norm": {"$float": "NaN"}, "lr": null})
        );
    }

    #[test]
    fn broken_frame_summary_says_why() {
        let cap = Capture::new(Some("application/octet-stream"), u64::MAX);
        let mut c = lock(&cap);
        assert!(c.take(b"\x80\x04garbage"));
        c.complete = true;
        let s = c.summary();
        assert!(
            s["dssst1_error"]
                .as_str()
                .unwrap()
                .contains("legacy pickle"),
            "{s}"
        );
    }
}
