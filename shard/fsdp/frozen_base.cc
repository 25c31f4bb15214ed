#include "shard/fsdp/frozen_base.h"

#include <string>

namespace shard {

FrozenBase::FrozenBase(Backend* backend, Communicator* shard_comm, int shard_size, int shard_rank, DType param_dtype,
                       DType param_shard_dtype, std::vector<Nf4UnitSpec> nf4_units, const Nf4Options& nf4)
    : backend_(backend),
      shard_comm_(shard_comm),
      shard_size_(shard_size),
      shard_rank_(shard_rank),
      param_dtype_(param_dtype),
      param_shard_dtype_(param_shard_dtype),
      nf4_units_(std::move(nf4_units)),
      nf4_(nf4),
      formats_(nf4_units_.size()),
      kept_runs_(nf4_units_.size()) {}

Status FrozenBase::InitQuantized(int u, const ShardLayout& layout, DeviceBuffer* params) {
  ASSIGN_OR_RETURN(formats_[u], Nf4ShardFormat::For(layout, nf4_units_[u], nf4_));
  for (int r = 0; r < shard_size_; ++r) kept_runs_[u].push_back(Nf4KeptRuns(layout, nf4_units_[u], r));
  ASSIGN_OR_RETURN(*params, DeviceBuffer::Create(backend_, formats_[u].floats()));
  backend_->Fill(params->data(), formats_[u].floats(), 0.0f);  // decodes to zeros until Write
  return OkStatus();
}

Status FrozenBase::Write(int u, const ShardLayout& layout, const float* host_shard, float* params) {
  const int64_t n = layout.shard_numel;
  if (quantized(u)) {
    std::vector<uint8_t> record(static_cast<size_t>(formats_[u].bytes));
    RETURN_IF_ERROR(EncodeNf4Shard(formats_[u], layout, nf4_units_[u], shard_rank_, host_shard, param_dtype_,
                                   record.data())
                        .WithContext("NF4 quantisation of unit " + std::to_string(u)));
    backend_->CopyToDevice(params, record.data(), record.size());
    return OkStatus();
  }
  if (param_shard_dtype_ == DType::kF32) {
    backend_->CopyToDevice(params, host_shard, static_cast<size_t>(n) * sizeof(float));
    return OkStatus();
  }
  std::vector<uint16_t> lp(static_cast<size_t>(n));
  ConvertFromF32(param_shard_dtype_, host_shard, lp.data(), lp.size());
  backend_->CopyToDevice(params, lp.data(), lp.size() * sizeof(uint16_t));
  return OkStatus();
}

void FrozenBase::Decode(int u, const ShardLayout& layout, const float* records, float* out, DType round_to,
                        DType out_dtype) {
  const Nf4ShardFormat& f = formats_[u];
  const int64_t elem = static_cast<int64_t>(DTypeSize(out_dtype));
  char* bytes = reinterpret_cast<char*>(out);
  for (int r = 0; r < shard_size_; ++r) {
    const char* rec = reinterpret_cast<const char*>(records) + static_cast<int64_t>(r) * f.bytes;
    backend_->DequantizeNf4(Nf4RunOf(f, rec), reinterpret_cast<float*>(bytes + layout.begin(r) * elem), round_to,
                            out_dtype);
    int64_t k = 0;  // the kept values follow each other in the record, in unit order
    for (const auto& [off, count] : kept_runs_[u][r]) {
      const auto* kept = reinterpret_cast<const float*>(rec + f.keep_off + k * 4);
      if (out_dtype == DType::kF32) {
        backend_->Copy(bytes + off * elem, kept, static_cast<size_t>(count) * 4);
      } else {
        backend_->CastFromF32(kept, bytes + off * elem, count, out_dtype);
      }
      k += count;
    }
  }
}

Status FrozenBase::Gather(int u, const ShardLayout& layout, const float* params, std::vector<float>* out,
                          const CommOptions& options) {
  const bool sharded = shard_size_ > 1;
  const bool q = quantized(u);
  const std::string what = (q ? "export all-gather of NF4 unit " : "export all-gather of unit ") + std::to_string(u);
  if (!out) {  // this rank takes part in the collective and keeps nothing
    if (!sharded) return OkStatus();
    const int64_t words = q ? formats_[u].floats() * shard_size_ : (layout.padded + 1) / 2;
    ASSIGN_OR_RETURN(DeviceBuffer gathered, DeviceBuffer::Create(backend_, words));
    if (q) return shard_comm_->AllGather(params, gathered.data(), formats_[u].floats(), options).WithContext(what);
    return shard_comm_->AllGather(params, gathered.data(), layout.shard_numel, param_shard_dtype_, options)
        .WithContext(what);
  }
  out->resize(layout.numel);
  ASSIGN_OR_RETURN(DeviceBuffer full, DeviceBuffer::Create(backend_, layout.padded));
  if (q) {  // the dequantised base, as the model computes with it (fp32: no rounding)
    if (sharded) {
      ASSIGN_OR_RETURN(DeviceBuffer records, DeviceBuffer::Create(backend_, formats_[u].floats() * shard_size_));
      RETURN_IF_ERROR(shard_comm_->AllGather(params, records.data(), formats_[u].floats(), options).WithContext(what));
      Decode(u, layout, records.data(), full.data(), DType::kF32, DType::kF32);
    } else {
      Decode(u, layout, params, full.data(), DType::kF32, DType::kF32);
    }
  } else {  // a two-byte shard is the base itself (there is no master): widen it
    if (sharded) {
      ASSIGN_OR_RETURN(DeviceBuffer lp, DeviceBuffer::Create(backend_, (layout.padded + 1) / 2));
      RETURN_IF_ERROR(
          shard_comm_->AllGather(params, lp.data(), layout.shard_numel, param_shard_dtype_, options).WithContext(what));
      backend_->CastToF32(lp.data(), full.data(), layout.padded, param_shard_dtype_);
    } else {
      backend_->CastToF32(params, full.data(), layout.numel, param_shard_dtype_);
    }
  }
  backend_->CopyToHost(out->data(), full.data(), static_cast<size_t>(layout.numel) * sizeof(float));
  return OkStatus();
}

}  // namespace shard
