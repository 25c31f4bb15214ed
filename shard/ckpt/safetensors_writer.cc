// SafetensorsWriter: header up front, tensors streamed in declaration order,
// atomic publish on Finish().
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "shard/ckpt/safetensors.h"

namespace shard {
namespace {

// Values converted per write() call: bounds the staging buffer (4 MiB at fp32)
// independently of tensor size.
constexpr size_t kChunkElems = size_t{1} << 20;

std::string Errno() {
  return std::strerror(errno);
}

// Unique per process and call, so two writers aimed at one path (two threads, or a
// retry while an abandoned writer still exists) never share a temp file.
std::string TempPathFor(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

}  // namespace

StatusOr<SafetensorsWriter> SafetensorsWriter::Create(const std::string& path,
                                                      std::vector<TensorDecl> tensors, DType file_dtype,
                                                      std::map<std::string, std::string> metadata) {
  SafetensorsWriter w;
  w.path_ = path;
  w.dtype_ = file_dtype;
  const uint64_t esize = DTypeSize(file_dtype);

  // ordered_json keeps declaration order in the header, which makes the file
  // readable by eye; readers must not rely on key order either way.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const TensorDecl& d : tensors) {
    const std::string where = path + ": tensor '" + d.name + "'";
    if (d.name.empty()) return InvalidArgument(path + ": empty tensor name");
    if (d.name == "__metadata__") return InvalidArgument(where + ": name is reserved by the format");
    if (!seen.insert(d.name).second) return InvalidArgument(where + " is declared twice");
    int64_t numel = 1;
    for (int64_t dim : d.shape) {
      if (dim < 0) return InvalidArgument(where + ": negative dimension in shape " + ShapeToString(d.shape));
      if (__builtin_mul_overflow(numel, dim, &numel)) {
        return InvalidArgument(where + ": shape " + ShapeToString(d.shape) + " overflows");
      }
    }
    const uint64_t bytes = static_cast<uint64_t>(numel) * esize;
    header[d.name] = {{"dtype", SafetensorsDTypeName(file_dtype)},
                      {"shape", nlohmann::ordered_json(d.shape)},
                      {"data_offsets", nlohmann::ordered_json::array({offset, offset + bytes})}};
    offset += bytes;
    w.numels_.push_back(numel);
  }
  w.decls_ = std::move(tensors);

  std::string text;
  try {
    text = header.dump();  // compact, as the reference writer emits
  } catch (const std::exception& e) {
    return InvalidArgument(path + ": tensor names and metadata must be valid UTF-8: " + e.what());
  }
  // Pad with spaces so the data section starts 8-byte aligned, as Hugging Face's
  // writer does; readers that map the file can then use the data in place.
  text.append((8 - text.size() % 8) % 8, ' ');
  uint8_t len[8];
  const uint64_t n = text.size();
  std::memcpy(len, &n, 8);  // little-endian host (checked in safetensors_reader.cc)

  w.tmp_path_ = TempPathFor(path);
  w.fd_ = ::open(w.tmp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (w.fd_ < 0) return NotFound("cannot create " + w.tmp_path_ + " (for " + path + "): " + Errno());
  RETURN_IF_ERROR(w.WriteBytes(len, 8));
  RETURN_IF_ERROR(w.WriteBytes(text.data(), text.size()));
  return w;
}

SafetensorsWriter& SafetensorsWriter::operator=(SafetensorsWriter&& o) noexcept {
  if (this != &o) {
    Abandon();
    path_ = std::move(o.path_);
    tmp_path_ = std::move(o.tmp_path_);
    decls_ = std::move(o.decls_);
    numels_ = std::move(o.numels_);
    dtype_ = o.dtype_;
    next_ = o.next_;
    fd_ = o.fd_;
    finished_ = o.finished_;
    failed_ = std::move(o.failed_);
    data_bytes_ = o.data_bytes_;
    o.fd_ = -1;
  }
  return *this;
}

SafetensorsWriter::~SafetensorsWriter() {
  Abandon();
}

void SafetensorsWriter::Abandon() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_path_.c_str());
    fd_ = -1;
  }
}

Status SafetensorsWriter::Fail(Status s) {
  Abandon();
  failed_ = s;
  return s;
}

Status SafetensorsWriter::WriteBytes(const void* p, size_t n) {
  const char* ptr = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t k = ::write(fd_, ptr, n);
    if (k < 0) {
      if (errno == EINTR) continue;
      return Fail(DataLoss("write to " + tmp_path_ + " failed: " + Errno()));
    }
    ptr += k;
    n -= static_cast<size_t>(k);
  }
  return OkStatus();
}

Status SafetensorsWriter::Write(const std::string& name, const float* data) {
  if (!failed_.ok()) return failed_;
  if (finished_) return FailedPrecondition(path_ + ": Write('" + name + "') after Finish()");
  if (next_ >= decls_.size()) {
    return FailedPrecondition(path_ + ": Write('" + name + "') but all " + std::to_string(decls_.size()) +
                              " declared tensors are already written");
  }
  if (name != decls_[next_].name) {
    return FailedPrecondition(path_ + ": Write('" + name + "') out of order; the next declared tensor is '" +
                              decls_[next_].name + "'");
  }
  const size_t n = static_cast<size_t>(numels_[next_]);
  if (n > 0 && data == nullptr) return InvalidArgument(path_ + ": Write('" + name + "') with null data");
  if (dtype_ == DType::kF32) {
    RETURN_IF_ERROR(WriteBytes(data, n * 4));  // little-endian fp32 is already the file layout
  } else {
    std::vector<uint16_t> buf(std::min(n, kChunkElems));
    for (size_t done = 0; done < n;) {
      const size_t k = std::min(n - done, kChunkElems);
      ConvertFromF32(dtype_, data + done, buf.data(), k);
      RETURN_IF_ERROR(WriteBytes(buf.data(), k * 2));
      done += k;
    }
  }
  data_bytes_ += n * DTypeSize(dtype_);
  ++next_;
  return OkStatus();
}

Status SafetensorsWriter::Finish() {
  if (!failed_.ok()) return failed_;
  if (finished_) return FailedPrecondition(path_ + ": Finish() called twice");
  if (next_ != decls_.size()) {
    return FailedPrecondition(path_ + ": Finish() with " + std::to_string(decls_.size() - next_) +
                              " declared tensors unwritten, starting at '" + decls_[next_].name + "'");
  }
  if (::fsync(fd_) != 0) return Fail(DataLoss("fsync of " + tmp_path_ + " failed: " + Errno()));
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const std::string err = Errno();
    ::unlink(tmp_path_.c_str());
    return Fail(DataLoss("close of " + tmp_path_ + " failed: " + err));
  }
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    const std::string err = Errno();
    ::unlink(tmp_path_.c_str());
    return Fail(DataLoss("rename " + tmp_path_ + " -> " + path_ + " failed: " + err));
  }
  finished_ = true;
  const std::filesystem::path parent = std::filesystem::path(path_).parent_path();
  return FsyncDir(parent.empty() ? "." : parent.string());
}

}  // namespace shard
