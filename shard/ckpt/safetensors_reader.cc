// SafetensorsFile: header validation and fp32 reads over a memory mapping.
#include <algorithm>
#include <bit>
#include <cstring>
#include <exception>

#include <nlohmann/json.hpp>

#include "shard/ckpt/safetensors.h"

namespace shard {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; shardd maps it without byte swapping");

namespace {

using json = nlohmann::json;

struct DTypeSpec {
  const char* name;
  int size;  // bytes per element
  std::optional<DType> dtype;
};

// Every dtype the format defines with a whole-byte element size. Only the first
// three are readable; the others are listed so their offsets can still be checked
// (a model may carry e.g. an I64 position-id buffer that shardd never reads).
constexpr DTypeSpec kDTypes[] = {
    {"F32", 4, DType::kF32},      {"BF16", 2, DType::kBF16},    {"F16", 2, DType::kF16},
    {"F64", 8, std::nullopt},     {"I64", 8, std::nullopt},     {"U64", 8, std::nullopt},
    {"C64", 8, std::nullopt},     {"I32", 4, std::nullopt},     {"U32", 4, std::nullopt},
    {"I16", 2, std::nullopt},     {"U16", 2, std::nullopt},     {"I8", 1, std::nullopt},
    {"U8", 1, std::nullopt},      {"BOOL", 1, std::nullopt},    {"F8_E4M3", 1, std::nullopt},
    {"F8_E5M2", 1, std::nullopt}, {"F8_E8M0", 1, std::nullopt},
};

const DTypeSpec* LookupDType(const std::string& name) {
  for (const DTypeSpec& s : kDTypes) {
    if (name == s.name) return &s;
  }
  return nullptr;
}

// Reads a JSON number that must be a non-negative integer.
bool GetNonNegative(const json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    *out = static_cast<uint64_t>(v.get<int64_t>());
    return true;
  }
  return false;
}

uint64_t ReadU64LE(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// Validates one tensor entry of the header against the data section size.
Status ParseTensor(const std::string& path, const std::string& name, const json& v, uint64_t data_size,
                   TensorInfo* out) {
  const std::string where = path + ": tensor '" + name + "'";
  if (!v.is_object()) return DataLoss(where + ": header entry is not a JSON object");
  out->name = name;

  auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) return DataLoss(where + ": missing or non-string \"dtype\"");
  out->dtype_name = dt->get<std::string>();
  const DTypeSpec* spec = LookupDType(out->dtype_name);
  if (spec) out->dtype = spec->dtype;

  auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array()) return DataLoss(where + ": missing or non-array \"shape\"");
  int64_t numel = 1;
  for (const json& d : *sh) {
    uint64_t dim;
    if (!GetNonNegative(d, &dim) || dim > static_cast<uint64_t>(INT64_MAX)) {
      return DataLoss(where + ": shape " + sh->dump() + " has an entry that is not a non-negative integer");
    }
    out->shape.push_back(static_cast<int64_t>(dim));
    if (__builtin_mul_overflow(numel, static_cast<int64_t>(dim), &numel)) {
      return DataLoss(where + ": shape " + sh->dump() + " overflows 64-bit element count");
    }
  }
  out->numel = numel;

  auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2 ||
      !GetNonNegative((*off)[0], &out->data_begin) || !GetNonNegative((*off)[1], &out->data_end)) {
    return DataLoss(where + ": \"data_offsets\" must be [begin, end] with non-negative integers");
  }
  const std::string offs =
      "data_offsets [" + std::to_string(out->data_begin) + ", " + std::to_string(out->data_end) + "]";
  if (out->data_begin > out->data_end) return DataLoss(where + ": " + offs + " has begin > end");
  if (out->data_end > data_size) {
    return DataLoss(where + ": " + offs + " ends past the data section (" + std::to_string(data_size) +
                    " bytes); the file is truncated or the header is corrupt");
  }
  // Unknown dtype names (sub-byte formats, future additions) have no whole-byte
  // size to check; they are unreadable anyway, so bounds are all that matter.
  if (spec) {
    uint64_t want;
    if (__builtin_mul_overflow(static_cast<uint64_t>(numel), static_cast<uint64_t>(spec->size), &want) ||
        out->data_end - out->data_begin != want) {
      return DataLoss(where + ": " + offs + " spans " + std::to_string(out->data_end - out->data_begin) +
                      " bytes but shape " + ShapeToString(out->shape) + " of " + out->dtype_name + " needs " +
                      std::to_string(numel) + " x " + std::to_string(spec->size));
    }
  }
  return OkStatus();
}

Status ParseMetadata(const std::string& path, const json& v, std::map<std::string, std::string>* out) {
  if (!v.is_object()) return DataLoss(path + ": \"__metadata__\" is not a JSON object");
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!it.value().is_string()) {
      return DataLoss(path + ": \"__metadata__\" value for '" + it.key() + "' is not a string");
    }
    (*out)[it.key()] = it.value().get<std::string>();
  }
  return OkStatus();
}

std::string Range(const TensorInfo& t) {
  std::string s = "[";  // (not "[" + ...: g++ 12 -Wrestrict false positive)
  s += std::to_string(t.data_begin);
  s += ", ";
  s += std::to_string(t.data_end);
  return s + "]";
}

// The official reader's rule (safetensors' validate): the tensors, in offset
// order, lie back to back from byte 0 to the end of the data section. Two
// tensors sharing bytes would alias (a write to one changes the other; an
// adapter's A and B read as one another); a gap or a tail is bytes no tensor
// owns, which transformers refuses too.
Status CheckDataLayout(const std::string& path, const std::vector<TensorInfo>& sorted, uint64_t data_size) {
  uint64_t end = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo& t : sorted) {
    if (prev && t.data_begin < end)
      return DataLoss(path + ": tensors '" + prev->name + "' " + Range(*prev) + " and '" + t.name + "' " + Range(t) +
                      " overlap in the data section; each tensor must own its bytes");
    if (t.data_begin > end)
      return DataLoss(path + ": bytes [" + std::to_string(end) + ", " + std::to_string(t.data_begin) +
                      ") of the data section belong to no tensor (before '" + t.name +
                      "'); safetensors stores tensors back to back");
    end = t.data_end;
    prev = &t;
  }
  if (end != data_size)
    return DataLoss(path + ": the data section has " + std::to_string(data_size - end) +
                    " bytes after the last tensor's end " + std::to_string(end) +
                    "; the header does not describe the whole file");
  return OkStatus();
}

}  // namespace

std::string ShapeToString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

const char* SafetensorsDTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "F32";
    case DType::kBF16:
      return "BF16";
    case DType::kF16:
      return "F16";
  }
  return "?";
}

StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  SafetensorsFile f;
  ASSIGN_OR_RETURN(f.file_, MappedFile::Open(path));
  const uint64_t size = f.file_.size();
  if (size < 8) {
    return DataLoss(path + ": " + std::to_string(size) +
                    " bytes is too short for a safetensors file (8-byte header length missing)");
  }
  const uint64_t header_len = ReadU64LE(f.file_.data());
  if (header_len > size - 8) {
    return DataLoss(path + ": header length " + std::to_string(header_len) + " exceeds the " +
                    std::to_string(size - 8) +
                    " bytes after the length field; the file is truncated or not safetensors");
  }
  if (header_len > kSafetensorsMaxHeaderBytes) {
    return DataLoss(path + ": header length " + std::to_string(header_len) + " exceeds the " +
                    std::to_string(kSafetensorsMaxHeaderBytes) + "-byte limit");
  }
  const char* hbegin = reinterpret_cast<const char*>(f.file_.data() + 8);
  const uint64_t data_size = size - 8 - header_len;
  f.data_ = f.file_.data() + 8 + header_len;

  // nlohmann throws; nothing past this function sees an exception.
  try {
    json header;
    try {
      header = json::parse(hbegin, hbegin + header_len);
    } catch (const json::parse_error& e) {
      return DataLoss(path + ": header is not valid JSON: " + e.what());
    }
    if (!header.is_object()) return DataLoss(path + ": header is JSON but not an object");
    for (auto it = header.begin(); it != header.end(); ++it) {
      if (it.key() == "__metadata__") {
        RETURN_IF_ERROR(ParseMetadata(path, it.value(), &f.metadata_));
        continue;
      }
      TensorInfo info;
      RETURN_IF_ERROR(ParseTensor(path, it.key(), it.value(), data_size, &info));
      f.tensors_.push_back(std::move(info));
    }
  } catch (const std::exception& e) {
    return DataLoss(path + ": malformed header: " + e.what());
  }

  std::sort(f.tensors_.begin(), f.tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
    if (a.data_begin != b.data_begin) return a.data_begin < b.data_begin;
    return a.data_end != b.data_end ? a.data_end < b.data_end : a.name < b.name;
  });
  RETURN_IF_ERROR(CheckDataLayout(path, f.tensors_, data_size));
  for (size_t i = 0; i < f.tensors_.size(); ++i) f.index_[f.tensors_[i].name] = i;
  return f;
}

const TensorInfo* SafetensorsFile::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Status SafetensorsFile::CheckReadable(const std::string& name, const TensorInfo** out) const {
  const TensorInfo* t = Find(name);
  if (!t) return NotFound(path() + ": no tensor '" + name + "'");
  if (!t->supported()) {
    return InvalidArgument(path() + ": tensor '" + name + "' has dtype " + t->dtype_name +
                           ", which shardd cannot convert to fp32 (readable: F32, BF16, F16)");
  }
  *out = t;
  return OkStatus();
}

Status SafetensorsFile::ReadF32(const std::string& name, const std::vector<int64_t>& expected_shape,
                                float* dst) const {
  const TensorInfo* t;
  RETURN_IF_ERROR(CheckReadable(name, &t));
  if (t->shape != expected_shape) {
    return InvalidArgument(path() + ": tensor '" + name + "' has shape " + ShapeToString(t->shape) + " (" +
                           t->dtype_name + "), expected " + ShapeToString(expected_shape));
  }
  return ReadF32Range(name, 0, t->numel, dst);
}

Status SafetensorsFile::ReadF32Range(const std::string& name, int64_t elem_begin, int64_t elem_count,
                                     float* dst) const {
  const TensorInfo* t;
  RETURN_IF_ERROR(CheckReadable(name, &t));
  if (elem_begin < 0 || elem_count < 0 || elem_begin > t->numel - elem_count) {
    return OutOfRange(path() + ": tensor '" + name + "' range [" + std::to_string(elem_begin) + ", +" +
                      std::to_string(elem_count) + ") is outside its " + std::to_string(t->numel) +
                      " elements");
  }
  if (elem_count == 0) return OkStatus();  // dst may be null for an empty tensor
  const size_t esize = DTypeSize(*t->dtype);
  const uint8_t* src = data_ + t->data_begin + static_cast<size_t>(elem_begin) * esize;
  const size_t n = static_cast<size_t>(elem_count);
  if (*t->dtype == DType::kF32 || reinterpret_cast<uintptr_t>(src) % esize == 0) {
    ConvertToF32(*t->dtype, src, dst, n);  // fp32 is a memcpy, alignment-free
    return OkStatus();
  }
  // The format does not promise aligned data (a header length that is not a
  // multiple of 8 shifts everything), so bounce 16-bit values through an aligned
  // buffer instead of dereferencing a misaligned uint16_t*.
  uint16_t buf[4096];
  for (size_t done = 0; done < n;) {
    const size_t k = std::min(n - done, sizeof(buf) / sizeof(buf[0]));
    std::memcpy(buf, src + done * esize, k * esize);
    ConvertToF32(*t->dtype, buf, dst + done, k);
    done += k;
  }
  return OkStatus();
}

}  // namespace shard
