#include "shard/comm/gloo/abortable_buffers.h"

#include <gloo/transport/unbound_buffer.h>

namespace shard::comm {

void AbortableBuffers::Track(::gloo::transport::UnboundBuffer* buffer) {
  std::lock_guard<std::mutex> lock(mu_);
  buffers_.insert(buffer);
  if (aborted_) {
    buffer->abortWaitRecv();
    buffer->abortWaitSend();
  }
}

void AbortableBuffers::Untrack(::gloo::transport::UnboundBuffer* buffer) {
  std::lock_guard<std::mutex> lock(mu_);
  buffers_.erase(buffer);
}

void AbortableBuffers::AbortAll() {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_ = true;
  // abortWait* only takes the buffer's own mutex, which a waiting thread releases
  // while it sleeps, so calling it under mu_ cannot deadlock.
  for (auto* buffer : buffers_) {
    buffer->abortWaitRecv();
    buffer->abortWaitSend();
  }
}

}  // namespace shard::comm
