#include "shard/backend/backend.h"

#include "shard/backend/cpu/cpu_backend.h"
#include "shard/config.h"

namespace shard {

StatusOr<std::unique_ptr<Backend>> CreateBackend(const std::string& device) {
  if (device == "cpu" || device == "auto") return std::unique_ptr<Backend>(cpu::CreateBackend());
  if (device == "cuda" || device.rfind("cuda:", 0) == 0)
    return Unimplemented("device '" + device +
                         "': the CUDA backend is not built into shardd yet; use device: cpu");
  return InvalidArgument("unknown device '" + device + "' (expected auto, cpu or cuda)");
}

StatusOr<DeviceBuffer> DeviceBuffer::Create(Backend* backend, int64_t n_floats) {
  DeviceBuffer b;
  b.backend_ = backend;
  b.n_ = n_floats;
  if (n_floats > 0) {
    ASSIGN_OR_RETURN(void* p, backend->Allocate(static_cast<size_t>(n_floats) * sizeof(float)));
    b.data_ = static_cast<float*>(p);
  }
  return b;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (data_) backend_->Free(data_);
    backend_ = o.backend_;
    data_ = o.data_;
    n_ = o.n_;
    o.data_ = nullptr;
    o.n_ = 0;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_) backend_->Free(data_);
}

}  // namespace shard
