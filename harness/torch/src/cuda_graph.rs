//! CUDA graphs for decoding: capture one decode step's kernels once, replay them every token.
//!
//! Decoding a token launches a few hundred small kernels (28 layers of norms, GEMMs, rotary,
//! attention, residuals); at a batch of 80 the GPU finishes each faster than the host can
//! queue the next, so eager decoding is bound by launches. A CUDA graph queues the whole step
//! with one launch. tch does not wrap libtorch's `at::cuda::CUDAGraph`, so a small C++ shim
//! does (`csrc/cuda_graph.cpp`). It links libtorch_cuda, whose own dependencies (cuBLAS,
//! cuDNN, ...) exist only on GPU hosts, so the executable embeds the shim's shared object and
//! opens it (from an anonymous in-memory file) the first time a CUDA engine asks for it; a
//! CPU-only host never loads it.
//!
//! The captured region must not sync with the host or change shapes or addresses: its inputs
//! live in tensors allocated before the capture and are overwritten in place between replays
//! (see `sample::sample`).

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

/// A shim call that makes a handle: `(err, errlen) -> handle or null`.
type MakeFn = unsafe extern "C" fn(*mut c_char, usize) -> *mut c_void;
/// A shim call on a handle: `(handle, err, errlen) -> 0 or 1`.
type HandleFn = unsafe extern "C" fn(*mut c_void, *mut c_char, usize) -> c_int;
/// Frees a handle.
type FreeFn = unsafe extern "C" fn(*mut c_void);

/// The shim's entry points.
struct Shim {
    side_enter: MakeFn,
    side_leave: HandleFn,
    graph_new: MakeFn,
    capture_begin: HandleFn,
    capture_end: HandleFn,
    replay: HandleFn,
    graph_free: FreeFn,
}

static SHIM: OnceLock<Result<Shim, String>> = OnceLock::new();

/// Why graphs are unavailable, or a graph call failed (libtorch's message, with what was being
/// done).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct GraphError(String);

/// The shim, loaded on first use; an error says why graphs are unavailable.
fn shim() -> Result<&'static Shim, GraphError> {
    SHIM.get_or_init(load)
        .as_ref()
        .map_err(|e| GraphError(e.clone()))
}

/// Whether this build can capture graphs and the shim loads (call only after CUDA is up).
pub fn available() -> Result<(), GraphError> {
    shim().map(|_| ())
}

#[cfg(rlh_cuda_graph)]
fn load() -> Result<Shim, String> {
    static SO: &[u8] = include_bytes!(env!("RLH_CUDA_GRAPH_SO"));
    // SAFETY: memfd_create with a valid NUL-terminated name; the descriptor stays open for
    // the life of the process (the loaded object is mapped from it).
    let fd = unsafe { libc::memfd_create(c"rlh_cuda_graph".as_ptr(), 0) };
    if fd < 0 {
        return Err(format!("memfd_create: {}", std::io::Error::last_os_error()));
    }
    let path = format!("/proc/self/fd/{fd}");
    std::fs::write(&path, SO).map_err(|e| format!("writing the CUDA graph shim: {e}"))?;
    let cpath = std::ffi::CString::new(path).map_err(|e| e.to_string())?;
    // SAFETY: dlopen of a valid path; the handle is kept for the process.
    let handle = unsafe { libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return Err(format!("loading the CUDA graph shim: {}", dl_error()));
    }
    macro_rules! sym {
        ($name:literal, $ty:ty) => {{
            // SAFETY: the symbol is looked up in the handle just opened; a missing one is an
            // error, and each found one has the signature the shim defines (csrc/cuda_graph.cpp).
            let p = unsafe { libc::dlsym(handle, concat!($name, "\0").as_ptr().cast()) };
            if p.is_null() {
                return Err(format!("the CUDA graph shim lacks {}", $name));
            }
            unsafe { std::mem::transmute::<*mut c_void, $ty>(p) }
        }};
    }
    Ok(Shim {
        side_enter: sym!("rlh_side_stream_enter", MakeFn),
        side_leave: sym!("rlh_side_stream_leave", HandleFn),
        graph_new: sym!("rlh_graph_new", MakeFn),
        capture_begin: sym!("rlh_graph_capture_begin", HandleFn),
        capture_end: sym!("rlh_graph_capture_end", HandleFn),
        replay: sym!("rlh_graph_replay", HandleFn),
        graph_free: sym!("rlh_graph_free", FreeFn),
    })
}

#[cfg(not(rlh_cuda_graph))]
fn load() -> Result<Shim, String> {
    Err("this build has no CUDA graph shim (no CUDA runtime headers when it was built)".into())
}

#[cfg(rlh_cuda_graph)]
fn dl_error() -> String {
    // SAFETY: dlerror returns a thread-local C string or null.
    unsafe {
        let e = libc::dlerror();
        if e.is_null() {
            "unknown error".into()
        } else {
            CStr::from_ptr(e).to_string_lossy().into_owned()
        }
    }
}

/// Calls a shim function with an error buffer; `Err` carries libtorch's message.
fn checked(what: &str, f: impl FnOnce(*mut c_char, usize) -> bool) -> Result<(), GraphError> {
    let mut buf = [0 as c_char; 1024];
    if f(buf.as_mut_ptr(), buf.len()) {
        return Ok(());
    }
    // SAFETY: the shim NUL-terminates whatever it wrote; the buffer starts zeroed.
    let msg = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy();
    Err(GraphError(format!("{what}: {msg}")))
}

/// While alive, this thread's current CUDA stream is a side stream from libtorch's pool
/// (graphs cannot be captured on the default stream). Entering orders the side stream after
/// the work queued before; dropping switches back and orders later work after the side
/// stream's.
pub struct SideStream {
    handle: *mut c_void,
}

impl SideStream {
    pub fn enter() -> Result<SideStream, GraphError> {
        let shim = shim()?;
        let mut handle = std::ptr::null_mut();
        checked("entering a side stream", |buf, len| {
            // SAFETY: the buffer is valid for `len` bytes.
            handle = unsafe { (shim.side_enter)(buf, len) };
            !handle.is_null()
        })?;
        Ok(SideStream { handle })
    }
}

impl Drop for SideStream {
    fn drop(&mut self) {
        if let Ok(shim) = shim() {
            let left = checked("leaving the side stream", |buf, len| {
                // SAFETY: the handle came from side_enter and is released here, once.
                unsafe { (shim.side_leave)(self.handle, buf, len) == 0 }
            });
            if let Err(e) = left {
                tracing::error!("{e}");
            }
        }
    }
}

/// One captured graph and its private memory pool (freed on drop).
pub struct Graph {
    handle: *mut c_void,
}

impl Graph {
    /// Captures what `body` queues on the current (side) stream, without running it, and
    /// returns the graph with `body`'s result (tensors in the graph's pool, which every
    /// replay rewrites).
    pub fn capture<T>(body: impl FnOnce() -> T) -> Result<(Graph, T), GraphError> {
        let shim = shim()?;
        let mut handle = std::ptr::null_mut();
        checked("creating a CUDA graph", |buf, len| {
            // SAFETY: the buffer is valid for `len` bytes.
            handle = unsafe { (shim.graph_new)(buf, len) };
            !handle.is_null()
        })?;
        // From here on the graph is freed on every path, an unwinding `body` included (the
        // shim ends a capture left open).
        let graph = Graph { handle };
        checked("beginning the capture", |buf, len| {
            // SAFETY: a live graph handle and a valid buffer.
            unsafe { (shim.capture_begin)(graph.handle, buf, len) == 0 }
        })?;
        let out = body();
        checked("ending the capture", |buf, len| {
            // SAFETY: as above.
            unsafe { (shim.capture_end)(graph.handle, buf, len) == 0 }
        })?;
        Ok((graph, out))
    }

    /// Queues the captured kernels on the current stream.
    pub fn replay(&self) -> Result<(), GraphError> {
        let shim = shim()?;
        checked("replaying the CUDA graph", |buf, len| {
            // SAFETY: a live graph handle and a valid buffer.
            unsafe { (shim.replay)(self.handle, buf, len) == 0 }
        })
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        if let Ok(shim) = shim() {
            // SAFETY: the handle came from graph_new and is freed here, once.
            unsafe { (shim.graph_free)(self.handle) }
        }
    }
}
