// The Gloo unbound buffers a collective is waiting on, so that Abort() can wake those
// waits from another thread.
//
// Why this exists: Abort() first fails every pair of the context (which wakes waits
// on operations still queued at a pair and closes the sockets, so peers fail too), but
// an operation already in flight on the socket is no longer queued, and its wait would
// sleep until the timeout. Calling abortWaitRecv/abortWaitSend on every tracked buffer
// covers that case. A buffer tracked after AbortAll() is aborted at once, so a call
// racing with Abort() cannot slip through.
//
// Thread-safe: mu_ guards buffers_ and aborted_. A buffer must be untracked before it
// is destroyed (ScopedTrack does this).
#pragma once

#include <mutex>
#include <set>

namespace gloo::transport {
class UnboundBuffer;
}

namespace shard::comm {

class AbortableBuffers {
 public:
  void Track(::gloo::transport::UnboundBuffer* buffer);
  void Untrack(::gloo::transport::UnboundBuffer* buffer);
  // Wakes every tracked buffer's waits (they return false) and every later Track.
  void AbortAll();

 private:
  std::mutex mu_;
  std::set<::gloo::transport::UnboundBuffer*> buffers_;  // guarded by mu_
  bool aborted_ = false;                                 // guarded by mu_
};

// Tracks a buffer for the lifetime of this object. Declare it after the buffer's
// owner so that it is destroyed (and untracks) first.
class ScopedTrack {
 public:
  ScopedTrack(AbortableBuffers& set, ::gloo::transport::UnboundBuffer* buffer)
      : set_(set), buffer_(buffer) {
    set_.Track(buffer_);
  }
  ~ScopedTrack() { set_.Untrack(buffer_); }
  ScopedTrack(const ScopedTrack&) = delete;
  ScopedTrack& operator=(const ScopedTrack&) = delete;

 private:
  AbortableBuffers& set_;
  ::gloo::transport::UnboundBuffer* buffer_;
};

}  // namespace shard::comm
