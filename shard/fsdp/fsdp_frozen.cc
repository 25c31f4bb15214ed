// FsdpRuntime's frozen-base storage (LoRA, QLoRA): how a frozen shard is
// written once at load (NF4 records, two-byte values, or fp32), how gathered
// NF4 records are decoded into a unit, and how export gathers a frozen unit
// that has no fp32 master. Kept apart from fsdp_runtime.cc, which holds the
// gather/reduce protocol every strategy shares.
#include <cstdint>
#include <vector>

#include "shard/fsdp/fsdp_runtime.h"

namespace shard {

Status FsdpRuntime::WriteFrozenShard(int u, const float* host_shard) {
  Unit& x = units_[u];
  if (!options_.frozen) return Internal("WriteFrozenShard: unit " + std::to_string(u) + " is not frozen");
  const int64_t n = x.layout.shard_numel;
  if (x.quantized) {
    std::vector<uint8_t> record(static_cast<size_t>(x.nf4.bytes));
    RETURN_IF_ERROR(EncodeNf4Shard(x.nf4, x.layout, options_.nf4_units[u], shard_rank_, host_shard,
                                   options_.param_dtype, record.data())
                        .WithContext("NF4 quantisation of unit " + std::to_string(u)));
    backend_->CopyToDevice(x.params.data(), record.data(), record.size());
    return OkStatus();
  }
  if (!lowp_shard()) {
    backend_->CopyToDevice(x.params.data(), host_shard, static_cast<size_t>(n) * sizeof(float));
    return OkStatus();
  }
  std::vector<uint16_t> lp(static_cast<size_t>(n));
  ConvertFromF32(options_.param_shard_dtype, host_shard, lp.data(), lp.size());
  backend_->CopyToDevice(x.params.data(), lp.data(), lp.size() * sizeof(uint16_t));
  return OkStatus();
}

void FsdpRuntime::DecodeNf4(int u, const float* records, float* out, DType round_to, DType out_dtype) {
  const Unit& x = units_[u];
  const int64_t elem = static_cast<int64_t>(DTypeSize(out_dtype));
  char* bytes = reinterpret_cast<char*>(out);
  for (int r = 0; r < shard_size_; ++r) {
    const char* rec = reinterpret_cast<const char*>(records) + static_cast<int64_t>(r) * x.nf4.bytes;
    backend_->DequantizeNf4(Nf4RunOf(x.nf4, rec), reinterpret_cast<float*>(bytes + x.layout.begin(r) * elem),
                            round_to, out_dtype);
    int64_t k = 0;  // the kept values follow each other in the record, in unit order
    for (const auto& [off, count] : x.kept_runs[r]) {
      const auto* kept = reinterpret_cast<const float*>(rec + x.nf4.keep_off + k * 4);
      if (out_dtype == DType::kF32) {
        backend_->Copy(bytes + off * elem, kept, static_cast<size_t>(count) * 4);
      } else {
        backend_->CastFromF32(kept, bytes + off * elem, count, out_dtype);
      }
      k += count;
    }
  }
}

Status FsdpRuntime::GatherFrozenUnit(int u, std::vector<float>* out) {
  Unit& x = units_[u];
  if (!out) {  // this rank takes part in the collective and keeps nothing
    if (!sharded()) return OkStatus();
    const int64_t words = x.quantized ? x.nf4.floats() * shard_size_ : (x.layout.padded + 1) / 2;
    ASSIGN_OR_RETURN(DeviceBuffer gathered, DeviceBuffer::Create(backend_, words));
    if (x.quantized)
      return shard_comm_->AllGather(x.params.data(), gathered.data(), x.nf4.floats(), UnitOptions(u))
          .WithContext("export all-gather of NF4 unit " + std::to_string(u));
    return shard_comm_->AllGather(x.params.data(), gathered.data(), x.layout.shard_numel, options_.param_shard_dtype,
                                  UnitOptions(u))
        .WithContext("export all-gather of unit " + std::to_string(u));
  }
  out->resize(x.layout.numel);
  ASSIGN_OR_RETURN(DeviceBuffer full, DeviceBuffer::Create(backend_, x.layout.padded));
  if (x.quantized) {  // the dequantised base, as the model computes with it (fp32: no rounding)
    if (sharded()) {
      ASSIGN_OR_RETURN(DeviceBuffer records, DeviceBuffer::Create(backend_, x.nf4.floats() * shard_size_));
      RETURN_IF_ERROR(shard_comm_->AllGather(x.params.data(), records.data(), x.nf4.floats(), UnitOptions(u))
                          .WithContext("export all-gather of NF4 unit " + std::to_string(u)));
      DecodeNf4(u, records.data(), full.data(), DType::kF32, DType::kF32);
    } else {
      DecodeNf4(u, x.params.data(), full.data(), DType::kF32, DType::kF32);
    }
  } else {  // a two-byte shard is the base itself (there is no master): widen it
    const DType dt = options_.param_shard_dtype;
    if (sharded()) {
      ASSIGN_OR_RETURN(DeviceBuffer lp, DeviceBuffer::Create(backend_, (x.layout.padded + 1) / 2));
      RETURN_IF_ERROR(shard_comm_->AllGather(x.params.data(), lp.data(), x.layout.shard_numel, dt, UnitOptions(u))
                          .WithContext("export all-gather of unit " + std::to_string(u)));
      backend_->CastToF32(lp.data(), full.data(), x.layout.padded, dt);
    } else {
      backend_->CastToF32(x.params.data(), full.data(), x.layout.numel, dt);
    }
  }
  backend_->CopyToHost(out->data(), full.data(), static_cast<size_t>(x.layout.numel) * sizeof(float));
  return OkStatus();
}

}  // namespace shard
