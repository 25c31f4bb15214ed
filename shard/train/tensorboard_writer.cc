#include "shard/train/tensorboard_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "shard/common/crc32c.h"
#include "shard/common/logging.h"
#include "shard/spec/step_metric_fields.h"

namespace shard {
namespace {

// Protobuf wire format: varints, fixed64/fixed32 little-endian, and
// length-delimited fields (wire types 0, 1, 5, 2).
void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
void PutTag(std::string* out, int field, int wire_type) { PutVarint(out, (static_cast<uint64_t>(field) << 3) | wire_type); }
void PutFixed(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void PutDouble(std::string* out, int field, double d) {
  uint64_t bits;
  std::memcpy(&bits, &d, 8);
  PutTag(out, field, 1);
  PutFixed(out, bits, 8);
}
void PutFloat(std::string* out, int field, float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  PutTag(out, field, 5);
  PutFixed(out, bits, 4);
}
void PutBytes(std::string* out, int field, std::string_view b) {
  PutTag(out, field, 2);
  PutVarint(out, b.size());
  out->append(b);
}
void PutInt64(std::string* out, int field, int64_t v) {
  PutTag(out, field, 0);
  PutVarint(out, static_cast<uint64_t>(v));
}

double UnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t MaskedCrc32c(std::string_view data) {
  const uint32_t crc = Crc32c(data.data(), data.size());
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string EncodeTfRecord(std::string_view data) {
  std::string out;
  PutFixed(&out, data.size(), 8);
  PutFixed(&out, MaskedCrc32c(out), 4);
  out.append(data);
  PutFixed(&out, MaskedCrc32c(data), 4);
  return out;
}

std::string EncodeFileVersionEvent(double wall_time) {
  std::string e;
  PutDouble(&e, 1, wall_time);
  PutInt64(&e, 2, 0);
  PutBytes(&e, 3, "brain.Event:2");
  return e;
}

std::string EncodeScalarEvent(double wall_time, int64_t step, const Scalars& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    PutBytes(&v, 1, tag);
    PutFloat(&v, 2, value);
    PutBytes(&summary, 1, v);
  }
  std::string e;
  PutDouble(&e, 1, wall_time);
  PutInt64(&e, 2, step);
  PutBytes(&e, 5, summary);
  return e;
}

StatusOr<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::Open(const std::string& dir, double flush_every_s) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return InvalidArgument("tensorboard: cannot create " + dir + ": " + ec.message());
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') std::strcpy(host, "localhost");
  const double now = UnixSeconds();
  // TensorBoard sorts files by name: the time prefix keeps attempts in order,
  // and the pid keeps two writers in the same second apart.
  std::string path = dir + "/events.out.tfevents." + std::to_string(static_cast<int64_t>(now)) + "." + host;
  if (std::filesystem::exists(path)) path += "." + std::to_string(getpid());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return InvalidArgument("tensorboard: cannot create " + path + ": " + std::strerror(errno));
  std::unique_ptr<TensorBoardWriter> w(new TensorBoardWriter());
  w->path_ = path;
  w->fd_ = fd;
  w->flush_every_s_ = flush_every_s;
  w->buffer_ = EncodeTfRecord(EncodeFileVersionEvent(now));
  RETURN_IF_ERROR(w->Flush());
  return w;
}

TensorBoardWriter::~TensorBoardWriter() {
  if (fd_ >= 0) {
    (void)Flush();
    ::close(fd_);
  }
}

Status TensorBoardWriter::WriteScalars(int64_t step, const Scalars& scalars) {
  buffer_ += EncodeTfRecord(EncodeScalarEvent(UnixSeconds(), step, scalars));
  const double since = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_flush_).count();
  if (since >= flush_every_s_) return Flush();
  return OkStatus();
}

Status TensorBoardWriter::Flush() {
  size_t done = 0;
  while (done < buffer_.size()) {
    const ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return DataLoss("tensorboard: cannot write " + path_ + ": " + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  buffer_.clear();
  last_flush_ = std::chrono::steady_clock::now();
  return OkStatus();
}

// Event files are a convenience: a run dir that cannot take one costs a
// warning, never the training.
std::unique_ptr<TensorBoardWriter> OpenRunTensorBoard(const std::string& dir) {
  auto w = TensorBoardWriter::Open(dir, /*flush_every_s=*/1.0);
  if (!w.ok()) {
    LOG_WARN("no TensorBoard events: {}", w.status().ToString());
    return nullptr;
  }
  LOG_INFO("TensorBoard events in {}", (*w)->path());
  return std::move(*w);
}

void WriteStepScalars(std::unique_ptr<TensorBoardWriter>& tb, const StepMetrics& m) {
  Scalars s = {{"loss", static_cast<float>(m.loss)},
               {"lr", static_cast<float>(m.lr)},
               {"grad_norm", static_cast<float>(m.grad_norm)},
               {"tokens_per_s", static_cast<float>(m.seconds > 0 ? m.tokens / m.seconds : 0)},
               {"step_time_s", static_cast<float>(m.seconds)},
               {"loss_scale", static_cast<float>(m.loss_scale)}};
  if (m.eval_samples > 0) {  // job file eval:
    s.push_back({"eval_loss", static_cast<float>(m.eval_loss)});
    if (m.eval_exact_match >= 0) s.push_back({"eval_exact_match", static_cast<float>(m.eval_exact_match)});
  }
  if (m.eval_pairs > 0) s.push_back({"eval/loss", static_cast<float>(m.eval_loss)});  // TRL's name too
  for (const StepMetricField& f : StepMetricFields())  // the optional figures under TRL's / HF's names
    if (FigurePresent(m, f)) s.push_back({std::string(f.display), static_cast<float>(m.*f.value)});
  for (size_t i = 0; m.moe_experts > 0 && i < m.expert_load.size(); ++i)  // per sparse layer / expert: its share
    s.push_back({"moe/expert_load/" + std::to_string(i / m.moe_experts) + "/" + std::to_string(i % m.moe_experts),
                 static_cast<float>(m.expert_load[i])});
  Status st = tb->WriteScalars(m.step, s);
  if (!st.ok()) {
    LOG_WARN("TensorBoard events stop: {}", st.ToString());
    tb.reset();
  }
}

}  // namespace shard
