#include "shard/backend/backend.h"

#include <cstdlib>
#include <cstring>
#include <vector>

#include "shard/backend/cpu/cpu_backend.h"
#include "shard/backend/profiling_backend.h"
#include "shard/backend/sim/sim_backend.h"
#include "shard/config.h"
#include "shard/tensor/nf4.h"
#if SHARDD_CUDA_ENABLED
#include "shard/backend/cuda/cuda_backend.h"
#endif

namespace shard {

int NumCudaDevices() {
#if SHARDD_CUDA_ENABLED
  return cuda::DeviceCount(nullptr);
#else
  return 0;
#endif
}

namespace {

// Synchronous backends finish their work before returning: nothing to wait for.
class DoneEvent final : public BackendEvent {
 public:
  void Wait() override {}
};

StatusOr<std::unique_ptr<Backend>> CreateUnwrapped(const std::string& device, const BackendOptions& options);

}  // namespace

void Backend::Copy2D(void* dst, size_t dst_stride, const void* src, size_t src_stride, size_t row_bytes,
                     int64_t rows) {
  for (int64_t r = 0; r < rows; ++r)
    Copy(static_cast<char*>(dst) + r * dst_stride, static_cast<const char*>(src) + r * src_stride, row_bytes);
}

std::shared_ptr<BackendEvent> Backend::RecordEvent() {
  static const std::shared_ptr<BackendEvent> done = std::make_shared<DoneEvent>();
  return done;
}

// Backends without an op the CPU backend has say so, naming the op and the
// feature it belongs to.
namespace {
Status NoOp(const Backend& b, const char* op, const char* feature) {
  return Unimplemented(std::string("backend ") + b.name() + ": " + op + " (" + feature +
                       ") is not implemented on this backend yet; the cpu backend has it");
}
Status NoMoeOp(const Backend& b, const char* op) { return NoOp(b, op, "mixture-of-experts"); }
}  // namespace

Status Backend::AttentionChunkForward(const AttentionShape&, const AttentionChunk&, const float*, const float*,
                                      const int32_t*, float*, float*) {
  return NoOp(*this, "AttentionChunkForward", "context parallelism");
}
Status Backend::AttentionChunkBackward(const AttentionShape&, const AttentionChunk&, const float*, const float*,
                                       const int32_t*, const float*, const float*, const float*, float*, float*) {
  return NoOp(*this, "AttentionChunkBackward", "context parallelism");
}

Status Backend::MoeRoute(const float*, const MoeRouting&) { return NoMoeOp(*this, "MoeRoute"); }
Status Backend::MoeRouteBackward(const MoeRouting&, const float*, const float*, float*) {
  return NoMoeOp(*this, "MoeRouteBackward");
}
Status Backend::MoePermute(const float*, const int32_t*, int64_t, int, int64_t, float*) {
  return NoMoeOp(*this, "MoePermute");
}
Status Backend::MoeUnpermute(const float*, const int32_t*, const float*, int64_t, int, int64_t, float*) {
  return NoMoeOp(*this, "MoeUnpermute");
}
Status Backend::MoeUnpermuteBackward(const float*, const float*, const int32_t*, const float*, int64_t, int, int64_t,
                                     float*, float*) {
  return NoMoeOp(*this, "MoeUnpermuteBackward");
}

void Backend::Dropout(const float* x, float* out, int64_t n, float p, uint64_t seed) {
  if (n <= 0) return;
  std::vector<float> h(static_cast<size_t>(n));
  CopyToHost(h.data(), x, h.size() * sizeof(float));
  const float keep_scale = 1.0f / (1.0f - p);
  for (int64_t i = 0; i < n; ++i) h[i] = DropoutKeep(seed, i, p) ? h[i] * keep_scale : 0.0f;
  CopyToDevice(out, h.data(), h.size() * sizeof(float));
}

void CheckStoredB(const GemmArgs& g) {
  SHARD_CHECK_MSG(g.b_dtype == DType::kF32 || g.compute == DType::kF32 || g.b_dtype == g.compute,
                  std::string("GEMM: B stored as ") + DTypeName(g.b_dtype) + " with compute " + DTypeName(g.compute));
}

void CheckNf4Output(DType round_to, DType out_dtype) {
  SHARD_CHECK_MSG(out_dtype == DType::kF32 || out_dtype == round_to,
                  std::string("DequantizeNf4: ") + DTypeName(out_dtype) + " output rounded to " + DTypeName(round_to));
}

void Backend::DequantizeNf4(const Nf4Run& run, float* out, DType round_to, DType out_dtype) {
  CheckNf4Output(round_to, out_dtype);
  if (run.numel <= 0) return;
  const int64_t blocks = run.numel / run.block_size;
  std::vector<uint8_t> codes(static_cast<size_t>(run.numel / 2));
  std::vector<float> scales(static_cast<size_t>(blocks));
  CopyToHost(codes.data(), run.codes, codes.size());
  if (run.absmax) {
    CopyToHost(scales.data(), run.absmax, scales.size() * sizeof(float));
  } else {
    std::vector<int8_t> q(scales.size());
    std::vector<float> group(static_cast<size_t>((blocks + kNf4DoubleQuantBlock - 1) / kNf4DoubleQuantBlock));
    float mean = 0;
    CopyToHost(q.data(), run.absmax_q, q.size());
    CopyToHost(group.data(), run.absmax_scale, group.size() * sizeof(float));
    CopyToHost(&mean, run.absmax_mean, sizeof(float));
    for (int64_t b = 0; b < blocks; ++b) scales[b] = static_cast<float>(q[b]) * group[b / kNf4DoubleQuantBlock] + mean;
  }
  std::vector<float> h(static_cast<size_t>(run.numel));
  for (int64_t i = 0; i < run.numel; i += 2) {
    const float s = scales[i / run.block_size];
    h[i] = kNf4Codebook[codes[i / 2] >> 4] * s;
    h[i + 1] = kNf4Codebook[codes[i / 2] & 15] * s;
  }
  if (round_to != DType::kF32) {
    std::vector<uint16_t> lp(h.size());
    ConvertFromF32(round_to, h.data(), lp.data(), h.size());
    if (out_dtype != DType::kF32) {
      CopyToDevice(out, lp.data(), lp.size() * sizeof(uint16_t));
      return;
    }
    ConvertToF32(round_to, lp.data(), h.data(), h.size());
  }
  CopyToDevice(out, h.data(), h.size() * sizeof(float));
}

StatusOr<std::unique_ptr<Backend>> CreateBackend(const std::string& device, const BackendOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> b, CreateUnwrapped(device, options));
  const char* profile = std::getenv("SHARDD_PROFILE_OPS");
  if (profile && *profile && std::strcmp(profile, "0") != 0) return WrapWithProfiler(std::move(b));
  return b;
}

namespace {

StatusOr<std::unique_ptr<Backend>> CreateUnwrapped(const std::string& device, const BackendOptions& options) {
  if (device == "cpu") return std::unique_ptr<Backend>(cpu::CreateBackend());
  if (device == "sim") return sim::CreateSimBackend(nullptr);
  if (device == "auto") {
    if (NumCudaDevices() > 0) return CreateUnwrapped("cuda", options);
    return std::unique_ptr<Backend>(cpu::CreateBackend());
  }
  if (device == "cuda" || device.rfind("cuda:", 0) == 0) {
    int index = 0;
    if (device.size() > 5) {
      const std::string n = device.substr(5);
      if (n.empty() || n.find_first_not_of("0123456789") != std::string::npos || n.size() > 4)
        return InvalidArgument("device '" + device + "': expected cuda or cuda:N");
      index = std::stoi(n);
    }
#if SHARDD_CUDA_ENABLED
    ASSIGN_OR_RETURN(Backend * b, cuda::CreateBackend(index, options));
    return std::unique_ptr<Backend>(b);
#else
    (void)index;
    return Unavailable("device '" + device +
                       "': this shardd was built without CUDA (SHARDD_WITH_CUDA=OFF or no toolkit); use device: cpu");
#endif
  }
  return InvalidArgument("unknown device '" + device + "' (expected auto, cpu, cuda or cuda:N)");
}

}  // namespace

StatusOr<void*> Backend::AllocateHost(size_t bytes) {
  constexpr size_t kAlignment = 64;
  const size_t rounded = bytes == 0 ? kAlignment : (bytes + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded < bytes) return ResourceExhausted(std::string(name()) + " backend: host allocation size overflows");
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (p == nullptr)
    return ResourceExhausted(std::string(name()) + " backend: cannot allocate " + std::to_string(bytes) +
                             " bytes of host memory");
  return p;
}

void Backend::FreeHost(void* ptr) { std::free(ptr); }

template <BufferSide kSide>
StatusOr<BackendBuffer<kSide>> BackendBuffer<kSide>::Create(Backend* backend, int64_t n_floats) {
  BackendBuffer b;
  b.backend_ = backend;
  b.n_ = n_floats;
  if (n_floats > 0) {
    const size_t bytes = static_cast<size_t>(n_floats) * sizeof(float);
    ASSIGN_OR_RETURN(void* p, kSide == BufferSide::kDevice ? backend->Allocate(bytes) : backend->AllocateHost(bytes));
    b.data_ = static_cast<float*>(p);
  }
  return b;
}

template <BufferSide kSide>
void BackendBuffer<kSide>::Release() {
  if (!data_) return;
  if (kSide == BufferSide::kDevice) {
    backend_->Free(data_);
  } else {
    backend_->FreeHost(data_);
  }
  data_ = nullptr;
}

template <BufferSide kSide>
BackendBuffer<kSide>& BackendBuffer<kSide>::operator=(BackendBuffer&& o) noexcept {
  if (this != &o) {
    Release();
    backend_ = o.backend_;
    data_ = o.data_;
    n_ = o.n_;
    o.data_ = nullptr;
    o.n_ = 0;
  }
  return *this;
}

template class BackendBuffer<BufferSide::kDevice>;
template class BackendBuffer<BufferSide::kHost>;

}  // namespace shard
