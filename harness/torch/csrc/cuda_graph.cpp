// CUDA graphs for the decode step: a C ABI over libtorch's `at::cuda::CUDAGraph`, which tch does
// not wrap. Built by `harness/torch/build.rs` into a small shared object that the engine loads
// only when it runs on CUDA (`src/cuda_graph.rs`), so the executable itself never needs
// libtorch_cuda's dependencies (cuBLAS, cuDNN, ...) on a CPU-only host.
//
// Every function catches what libtorch throws and copies its message into `err` (at most
// `errlen` bytes, NUL-terminated): no C++ exception crosses into Rust.

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>

#include <cstring>
#include <exception>

namespace {

void set_err(char* err, size_t errlen, const char* what) {
  if (err == nullptr || errlen == 0) {
    return;
  }
  std::strncpy(err, what, errlen - 1);
  err[errlen - 1] = '\0';
}

// The side stream a decode loop runs on (graphs cannot be captured on the default stream), and
// the stream that was current before, restored on leave. Each switch orders the two streams
// with an event, so the side stream sees everything queued before it and later work on the
// original stream sees everything the side stream did.
struct Side {
  c10::cuda::CUDAStream before;
  c10::cuda::CUDAStream side;
};

struct Graph {
  at::cuda::CUDAGraph graph;
  bool capturing = false;
};

}  // namespace

extern "C" {

void* rlh_side_stream_enter(char* err, size_t errlen) {
  try {
    auto before = c10::cuda::getCurrentCUDAStream();
    auto side = c10::cuda::getStreamFromPool(false, before.device_index());
    c10::cuda::CUDAEvent ready;
    ready.record(before);
    ready.block(side);
    c10::cuda::setCurrentCUDAStream(side);
    return new Side{before, side};
  } catch (const std::exception& e) {
    set_err(err, errlen, e.what());
    return nullptr;
  }
}

int rlh_side_stream_leave(void* handle, char* err, size_t errlen) {
  auto* s = static_cast<Side*>(handle);
  try {
    c10::cuda::CUDAEvent done;
    done.record(s->side);
    done.block(s->before);
    c10::cuda::setCurrentCUDAStream(s->before);
    delete s;
    return 0;
  } catch (const std::exception& e) {
    set_err(err, errlen, e.what());
    delete s;
    return 1;
  }
}

void* rlh_graph_new(char* err, size_t errlen) {
  try {
    return new Graph();
  } catch (const std::exception& e) {
    set_err(err, errlen, e.what());
    return nullptr;
  }
}

// Thread-local capture: other threads of the server (a training call, another job) may use
// CUDA meanwhile without invalidating the capture.
int rlh_graph_capture_begin(void* handle, char* err, size_t errlen) {
  auto* g = static_cast<Graph*>(handle);
  try {
    g->graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
    g->capturing = true;
    return 0;
  } catch (const std::exception& e) {
    set_err(err, errlen, e.what());
    return 1;
  }
}

int rlh_graph_capture_end(void* handle, char* err, size_t errlen) {
  auto* g = static_cast<Graph*>(handle);
  try {
    g->capturing = false;
    g->graph.capture_end();
    return 0;
  } catch (const std::exception& e) {
    set_err(err, errlen, e.what());
    return 1;
  }
}

int rlh_graph_replay(void* handle, char* err, size_t errlen) {
  auto* g = static_cast<Graph*>(handle);
  try {
    g->graph.replay();
    return 0;
  } catch (const std::exception& e) {
    set_err(err, errlen, e.what());
    return 1;
  }
}

// Frees the graph and its memory pool. A capture still open (the Rust side unwound out of it)
// is ended first and its error dropped, so the stream leaves capture mode.
void rlh_graph_free(void* handle) {
  auto* g = static_cast<Graph*>(handle);
  if (g == nullptr) {
    return;
  }
  if (g->capturing) {
    try {
      g->graph.capture_end();
    } catch (...) {
    }
  }
  delete g;
}

}  // extern "C"
