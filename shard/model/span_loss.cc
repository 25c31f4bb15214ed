// LlamaModel's loss of per-span sums (llama_model.h ForwardBackwardSpans): the
// preference objectives score whole replies, so the factor each target
// token's gradient carries is known only once the forward has summed its
// reply's log-probs.
#include <algorithm>
#include <string>

#include "shard/model/llama_model.h"

namespace shard {

namespace {

Status CheckSpans(const DeviceBatch& b, const std::vector<RowSpan>& spans) {
  if (!b.targets) return InvalidArgument("model: span loss over a micro-batch without targets");
  for (const RowSpan& s : spans)
    if (s.begin < 0 || s.end < s.begin || s.end > b.rows())
      return InvalidArgument("model: span [" + std::to_string(s.begin) + ", " + std::to_string(s.end) +
                             ") is outside the micro-batch of " + std::to_string(b.rows()) + " rows");
  return OkStatus();
}

}  // namespace

StatusOr<double> LlamaModel::ForwardBackwardSpans(const DeviceBatch& b, UnitAccess& access, const SpanLoss& loss) {
  RETURN_IF_ERROR(CheckSpans(b, loss.spans));
  if (!loss.scales) return InvalidArgument("model: span loss without a scales function");
  RETURN_IF_ERROR(ForwardTrunk(b, access, /*keep=*/true));
  return HeadAndBackward(b, access, 0.0f, &loss);
}

StatusOr<std::vector<double>> LlamaModel::ForwardSpanLosses(const DeviceBatch& b, UnitAccess& access,
                                                            const std::vector<RowSpan>& spans) {
  RETURN_IF_ERROR(CheckSpans(b, spans));
  RETURN_IF_ERROR(ForwardTrunk(b, access, /*keep=*/false));
  ASSIGN_OR_RETURN(const WeightRef w_head, HeadForward(b, access));
  std::vector<double> out;
  SpanLoss record{spans, [&](const std::vector<double>& nll) -> StatusOr<std::vector<float>> {
                    out = nll;
                    return std::vector<float>(nll.size(), 0.0f);
                  }};
  Status st = SpanRowScales(b, w_head, record).status();
  RETURN_IF_ERROR(ReleaseHead(access));
  RETURN_IF_ERROR(st);
  return out;
}

StatusOr<std::vector<float>> LlamaModel::SpanRowScales(const DeviceBatch& b, const WeightRef& w_head,
                                                       const SpanLoss& loss) {
  const int64_t n = b.rows(), d = config_.hidden_size, vocab = config_.vocab_size;
  std::vector<double> nll(loss.spans.size(), 0.0);
  for (int64_t r0 = 0; r0 < n; r0 += chunk_rows_) {
    const int64_t m = std::min(chunk_rows_, n - r0);
    LinearForward(backend_, options_.matmul_dtype, final_norm_.data() + r0 * d, w_head, m, d, vocab, logits_.data());
    for (size_t s = 0; s < loss.spans.size(); ++s) {
      const int64_t lo = std::max(loss.spans[s].begin, r0), hi = std::min(loss.spans[s].end, r0 + m);
      if (lo >= hi) continue;
      nll[s] += backend_->CrossEntropy(logits_.data() + (lo - r0) * vocab, b.targets + lo, hi - lo,
                                       static_cast<int>(vocab), 1.0f, /*grad=*/false);
    }
  }
  ASSIGN_OR_RETURN(std::vector<float> factor, loss.scales(nll));
  if (factor.size() != loss.spans.size())
    return Internal("model: the span loss gave " + std::to_string(factor.size()) + " factors for " +
                    std::to_string(loss.spans.size()) + " spans");
  std::vector<float> row(static_cast<size_t>(n), 0.0f);
  for (size_t s = 0; s < loss.spans.size(); ++s)
    std::fill(row.begin() + loss.spans[s].begin, row.begin() + loss.spans[s].end, factor[s]);
  return row;
}

}  // namespace shard
