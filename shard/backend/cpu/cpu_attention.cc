// Causal grouped-query attention on fused qkv, flash-attention style: queries
// are processed in tiles of kTileRows rows, each tile sees only its key window
// [segment start, last row], and no [seq, seq] matrix is ever materialised.
//
// Per task, the head's q/k/v are first packed into contiguous, zero-padded
// scratch (rows to a multiple of 16, head_dim to a multiple of 8) so every
// product is a SmallGemm with full vector tiles; padded keys and masked
// positions get probability exactly 0, so padding never leaks into results.
//
// Forward is parallel over (batch, head). Backward is parallel over
// (batch, kv head): the task owns dK/dV of that kv head and loops over the
// query heads of its group, so the accumulation has no races and a fixed order.
//
// The same kernels serve a chunk of queries over a longer key range (context
// parallelism, backend.h's AttentionChunk*): the query rows are then a
// window [q_offset, q_offset + q_len) of the positions, q and k/v come from
// separate buffers, and only keys up to the window's end are packed.
// Segments are contiguous runs of equal segment_ids (backend.h's contract): a
// token's keys are the positions from the start of its run up to itself, so
// masking is a key range, not a per-key test. (An id that reappears after a
// different one starts a new segment.)
#include <algorithm>
#include <cmath>
#include <vector>

#include "shard/backend/cpu/cpu_kernels.h"
#include "shard/backend/cpu/cpu_math.h"

namespace shard::cpu {
namespace {

// Query rows per tile: five 6-row micro-kernel blocks. It is also the depth of
// the dK/dV products, so it should not be much smaller.
constexpr int64_t kTileRows = 30;

// Where the rows are. Keys and values: `seq` rows per sequence, row t of
// sequence b at k/v + (b*seq + t)*kv_stride (+ the head's columns). Queries: a
// chunk of q_rows consecutive positions starting at q_off (all of the
// sequence for plain attention), row r at q + (b*q_rows + r)*q_stride; out,
// lse, dq and dout follow the query rows. Only keys [0, q_off + q_rows) can be
// seen (causal), so only those are packed.
struct Layout {
  Layout(const AttentionShape& s, int64_t q_off_, int64_t q_rows_)
      : batch(s.batch),
        seq(s.seq),
        q_off(q_off_),
        q_rows(q_rows_),
        q_pad(RoundUp(q_rows_, 16)),
        kv_len(q_off_ + q_rows_),
        kv_pad(RoundUp(q_off_ + q_rows_, 16)),
        n_heads(s.n_heads),
        n_kv(s.n_kv_heads),
        hd(s.head_dim),
        hd_pad(RoundUp(s.head_dim, 8)),
        group(s.n_heads / s.n_kv_heads),
        out_stride(s.out_stride()),
        scale(static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim)))) {
    SHARD_CHECK_MSG(s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0,
                    "attention: n_heads must be a multiple of n_kv_heads");
    SHARD_CHECK_MSG(q_off_ >= 0 && q_rows_ >= 0 && q_off_ + q_rows_ <= s.seq,
                    "attention: the query chunk must lie inside the key range");
  }
  const float* Q(int64_t b, int h) const { return q + b * q_rows * q_stride + static_cast<int64_t>(h) * hd; }
  const float* K(int64_t b, int g) const { return k + b * seq * kv_stride + static_cast<int64_t>(g) * hd; }
  const float* V(int64_t b, int g) const { return v + b * seq * kv_stride + static_cast<int64_t>(g) * hd; }

  int64_t batch, seq, q_off, q_rows, q_pad, kv_len, kv_pad;
  int n_heads, n_kv, hd, hd_pad, group;
  int64_t out_stride;
  float scale;
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t q_stride = 0, kv_stride = 0;
};

// Where the backward writes: dq follows the query rows, dk/dv the key rows.
struct Grads {
  float* dq;
  int64_t dq_stride;
  float* dk;
  float* dv;
  int64_t dkv_stride;
};

// start[b*seq + t]: the position (within its sequence) where token t's segment begins.
std::vector<int32_t> SegmentStarts(const Layout& l, const int32_t* segment_ids) {
  std::vector<int32_t> start(static_cast<size_t>(l.batch * l.seq), 0);
  if (segment_ids == nullptr) return start;
  for (int64_t b = 0; b < l.batch; ++b) {
    const int32_t* seg = segment_ids + b * l.seq;
    int32_t* st = start.data() + b * l.seq;
    for (int64_t t = 1; t < l.seq; ++t) st[t] = seg[t] == seg[t - 1] ? st[t - 1] : static_cast<int32_t>(t);
  }
  return start;
}

// Rows this far ahead are prefetched when walking a strided head slice.
constexpr int64_t kPrefetchRows = 24;

// dst[pad, hd_pad] = mul * the first `rows` src rows (stride `stride`), zero padding.
void PackRows(const Layout& l, int64_t rows, int64_t pad, const float* src, int64_t stride, float mul, float* dst) {
  for (int64_t t = 0; t < rows; ++t) {
    if (t + kPrefetchRows < rows) PrefetchFloats(src + (t + kPrefetchRows) * stride, l.hd);
    const float* s = src + t * stride;
    float* d = dst + t * l.hd_pad;
    for (int j = 0; j < l.hd; ++j) d[j] = mul * s[j];
    for (int j = l.hd; j < l.hd_pad; ++j) d[j] = 0.0f;
  }
  std::fill(dst + rows * l.hd_pad, dst + pad * l.hd_pad, 0.0f);
}

// dst[hd, kv_pad] = transpose of the visible key rows, zero padding.
// Row by row, so the source is read contiguously; the hd destination rows
// being filled stay in L1.
void PackTransposed(const Layout& l, const float* src, int64_t stride, float* dst) {
  for (int64_t t = 0; t < l.kv_len; ++t) {
    if (t + kPrefetchRows < l.kv_len) PrefetchFloats(src + (t + kPrefetchRows) * stride, l.hd);
    const float* s = src + t * stride;
    for (int j = 0; j < l.hd; ++j) dst[j * l.kv_pad + t] = s[j];
  }
  for (int j = 0; j < l.hd; ++j) std::fill(dst + j * l.kv_pad + l.kv_len, dst + (j + 1) * l.kv_pad, 0.0f);
}

// A query tile: rows [i0, i0 + rows) of a sequence and their key window
// [lo, lo + width), widened to multiples of 16 so score tiles are whole
// vectors. Starts never decrease along a sequence, so start[i0] is the
// tile's smallest. Scratch tiles are [rows, width] with row stride width.
//
// The products below skip work the causal mask zeroes: a block of kBlock query
// rows only needs keys up to its last row (rounded up to 16), and a block of
// kBlock keys only needs the query rows at or after it.
constexpr int64_t kBlock = 6;  // SmallGemm's register-tile height

struct Tile {
  // i0, i1: positions in the sequence; q_off: the position of the first packed
  // query row (so the tile's rows are packed rows i0 - q_off onwards).
  Tile(const int32_t* start, int64_t i0_, int64_t i1, int64_t q_off)
      : i0(i0_), r0(i0_ - q_off), rows(i1 - i0_), lo(start[i0_] / 16 * 16), width(RoundUp(i1, 16) - lo) {}
  // Keys (window columns) that query rows [0, r1) of the tile can see.
  int64_t KeysUpTo(int64_t r1) const { return std::min(width, RoundUp(i0 + r1, 16) - lo); }
  // First tile row that can see window column c.
  int64_t FirstRowSeeing(int64_t c) const { return std::clamp<int64_t>(lo + c - i0, 0, rows); }

  int64_t i0, r0, rows, lo, width;
};

// out[rows, width] = a[tile rows, hd] * bt[hd, lo:lo+width] (scores, or dP).
void RowsByKeys(const Tile& t, const float* a, int64_t lda, const float* bt, int64_t ldbt, int hd,
                float* out) {
  for (int64_t r0 = 0; r0 < t.rows; r0 += kBlock) {
    const int64_t mr = std::min(kBlock, t.rows - r0);
    SmallGemm(mr, t.KeysUpTo(r0 + mr), hd, a + (t.r0 + r0) * lda, lda, 1, bt + t.lo, ldbt,
              out + r0 * t.width, t.width, false);
  }
}

// out[rows, n] = p[rows, width] * b[lo:lo+width, n] (P V, or dS K).
void RowsByValues(const Tile& t, const float* p, const float* b, int64_t n, float* out) {
  for (int64_t r0 = 0; r0 < t.rows; r0 += kBlock) {
    const int64_t mr = std::min(kBlock, t.rows - r0);
    SmallGemm(mr, n, t.KeysUpTo(r0 + mr), p + r0 * t.width, t.width, 1, b + t.lo * n, n,
              out + r0 * n, n, false);
  }
}

// acc[lo:lo+width, n] += p[rows, width]^T * b[tile rows, n] (dK from dS, dV from P).
void KeysByRows(const Tile& t, const float* p, const float* b, int64_t n, float* acc) {
  for (int64_t c0 = 0; c0 < t.width; c0 += kBlock) {
    const int64_t mc = std::min(kBlock, t.width - c0);
    const int64_t r0 = t.FirstRowSeeing(c0);
    if (r0 >= t.rows) break;
    SmallGemm(mc, n, t.rows - r0, p + r0 * t.width + c0, 1, t.width, b + (t.r0 + r0) * n, n,
              acc + (t.lo + c0) * n, n, true);
  }
}

// Turns scores s[a, e) into unnormalised probabilities exp(s - max) and zeroes
// the rest of the row; returns the row's sum. (The output row is divided by
// the sum afterwards, which is cheaper than normalising P.)
float SoftmaxRow(float* s, int64_t a, int64_t e, int64_t width, float* max_out) {
  const float mx = MaxOf(s + a, e - a);
  const float sum = static_cast<float>(ExpShiftSum(s + a, s + a, e - a, mx));
  std::fill(s, s + a, 0.0f);
  std::fill(s + e, s + width, 0.0f);
  *max_out = mx;
  return sum;
}

void ForwardTask(const Layout& l, const int32_t* starts, int64_t b, int h, float* out, float* lse) {
  const int g = h / l.group;
  const int64_t tile_floats = kTileRows * l.kv_pad;
  ScratchCarver sc(ThreadScratch(ScratchCarver::Size(
      {l.q_pad * l.hd_pad, l.hd * l.kv_pad, l.kv_pad * l.hd_pad, tile_floats, kTileRows * l.hd_pad})));
  float* q = sc.Take(l.q_pad * l.hd_pad);    // scaled by 1/sqrt(hd): S = q k^T
  float* kt = sc.Take(l.hd * l.kv_pad);      // k transposed
  float* v = sc.Take(l.kv_pad * l.hd_pad);
  float* s = sc.Take(tile_floats);           // scores, then probabilities
  float* o = sc.Take(kTileRows * l.hd_pad);  // output tile
  PackRows(l, l.q_rows, l.q_pad, l.Q(b, h), l.q_stride, l.scale, q);
  PackTransposed(l, l.K(b, g), l.kv_stride, kt);
  PackRows(l, l.kv_len, l.kv_pad, l.V(b, g), l.kv_stride, 1.0f, v);
  const int32_t* start = starts + b * l.seq;
  float* lse_bh = lse + (b * l.n_heads + h) * l.q_rows;
  float* out_b = out + b * l.q_rows * l.out_stride + static_cast<int64_t>(h) * l.hd;
  float inv_sum[kTileRows];

  for (int64_t i0 = l.q_off; i0 < l.kv_len; i0 += kTileRows) {
    const Tile t(start, i0, std::min(l.kv_len, i0 + kTileRows), l.q_off);
    for (int64_t r = 0; r < t.rows; ++r)  // written at the end of the tile
      PrefetchFloatsForWrite(out_b + (t.r0 + r) * l.out_stride, l.hd);
    RowsByKeys(t, q, l.hd_pad, kt, l.kv_pad, l.hd, s);
    for (int64_t r = 0; r < t.rows; ++r) {
      const int64_t i = i0 + r;
      float mx;
      const float sum = SoftmaxRow(s + r * t.width, start[i] - t.lo, i + 1 - t.lo, t.width, &mx);
      inv_sum[r] = 1.0f / sum;
      lse_bh[t.r0 + r] = mx + std::log(sum);
    }
    RowsByValues(t, s, v, l.hd_pad, o);
    for (int64_t r = 0; r < t.rows; ++r) {
      float* dst = out_b + (t.r0 + r) * l.out_stride;
      const float* src = o + r * l.hd_pad;
      for (int j = 0; j < l.hd; ++j) dst[j] = src[j] * inv_sum[r];
    }
  }
}

// delta[r] = dO_r . O_r for the query rows of head h.
void RowDots(const Layout& l, const float* out_h, const float* dout_h, float* delta) {
  for (int64_t t = 0; t < l.q_rows; ++t) {
    if (t + kPrefetchRows < l.q_rows) PrefetchFloats(out_h + (t + kPrefetchRows) * l.out_stride, l.hd);
    const float* o_t = out_h + t * l.out_stride;
    const float* do_t = dout_h + t * l.hd_pad;
    float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
    for (int j = 0; j < l.hd; ++j) acc += do_t[j] * o_t[j];
    delta[t] = acc;
  }
}

// P = exp(S - lse) and dS = P * (dP - delta) over each row's key window; zero elsewhere.
void ProbabilitiesAndScoreGrads(const Tile& t, const int32_t* start, const float* lse_h, const float* delta,
                                float* p, float* ds) {
  for (int64_t r = 0; r < t.rows; ++r) {
    const int64_t i = t.i0 + r, a = start[i] - t.lo, e = i + 1 - t.lo;
    float* pr = p + r * t.width;
    float* dsr = ds + r * t.width;
    const float m = lse_h[t.r0 + r], d = delta[t.r0 + r];
#pragma omp simd
    for (int64_t j = a; j < e; ++j) {
      const float pj = FastExp(pr[j] - m);
      pr[j] = pj;
      dsr[j] = pj * (dsr[j] - d);
    }
    std::fill(pr, pr + a, 0.0f);
    std::fill(pr + e, pr + t.width, 0.0f);
    std::fill(dsr, dsr + a, 0.0f);
    std::fill(dsr + e, dsr + t.width, 0.0f);
  }
}

// Backward for one (batch, kv head), recomputing P from the saved lse:
// dV += P^T dO, dP = dO V^T, dS = P * (dP - D) with D_i = dO_i . O_i,
// dQ = scale dS K, dK += scale dS^T Q (scale folded into the packed q).
void BackwardTask(const Layout& l, const int32_t* starts, const float* out, const float* lse, const float* dout,
                  int64_t b, int g, const Grads& gr) {
  const int64_t kv_panel = l.kv_pad * l.hd_pad, q_panel = l.q_pad * l.hd_pad, trans = l.hd * l.kv_pad;
  const int64_t tile_floats = kTileRows * l.kv_pad;
  ScratchCarver sc(ThreadScratch(ScratchCarver::Size({kv_panel, trans, trans, kv_panel, kv_panel, q_panel, q_panel,
                                                      l.q_pad, tile_floats, tile_floats, kTileRows * l.hd_pad})));
  float* k = sc.Take(kv_panel);
  float* kt = sc.Take(trans);
  float* vt = sc.Take(trans);
  float* dk = sc.Take(kv_panel);
  float* dv = sc.Take(kv_panel);
  float* q = sc.Take(q_panel);  // scaled
  float* dout_h = sc.Take(q_panel);
  float* delta = sc.Take(l.q_pad);
  float* p = sc.Take(tile_floats);
  float* ds = sc.Take(tile_floats);
  float* dq = sc.Take(kTileRows * l.hd_pad);
  PackRows(l, l.kv_len, l.kv_pad, l.K(b, g), l.kv_stride, 1.0f, k);
  PackTransposed(l, l.K(b, g), l.kv_stride, kt);
  PackTransposed(l, l.V(b, g), l.kv_stride, vt);
  std::fill(dk, dk + kv_panel, 0.0f);
  std::fill(dv, dv + kv_panel, 0.0f);
  const int32_t* start = starts + b * l.seq;

  for (int h = g * l.group; h < (g + 1) * l.group; ++h) {
    PackRows(l, l.q_rows, l.q_pad, l.Q(b, h), l.q_stride, l.scale, q);
    const int64_t head_col = static_cast<int64_t>(h) * l.hd;
    PackRows(l, l.q_rows, l.q_pad, dout + b * l.q_rows * l.out_stride + head_col, l.out_stride, 1.0f, dout_h);
    RowDots(l, out + b * l.q_rows * l.out_stride + head_col, dout_h, delta);
    const float* lse_bh = lse + (b * l.n_heads + h) * l.q_rows;
    float* dq_bh = gr.dq + b * l.q_rows * gr.dq_stride + head_col;

    for (int64_t i0 = l.q_off; i0 < l.kv_len; i0 += kTileRows) {
      const Tile t(start, i0, std::min(l.kv_len, i0 + kTileRows), l.q_off);
      for (int64_t r = 0; r < t.rows; ++r)  // dQ rows, written after the products below
        PrefetchFloatsForWrite(dq_bh + (t.r0 + r) * gr.dq_stride, l.hd);
      RowsByKeys(t, q, l.hd_pad, kt, l.kv_pad, l.hd, p);
      RowsByKeys(t, dout_h, l.hd_pad, vt, l.kv_pad, l.hd, ds);
      ProbabilitiesAndScoreGrads(t, start, lse_bh, delta, p, ds);
      // dQ rows of this tile are complete after one product: write them out.
      RowsByValues(t, ds, k, l.hd_pad, dq);
      for (int64_t r = 0; r < t.rows; ++r) {
        float* dst = dq_bh + (t.r0 + r) * gr.dq_stride;
        const float* src = dq + r * l.hd_pad;
        for (int j = 0; j < l.hd; ++j) dst[j] = l.scale * src[j];
      }
      KeysByRows(t, ds, q, l.hd_pad, dk);
      KeysByRows(t, p, dout_h, l.hd_pad, dv);
    }
  }

  // dK/dV of every key row of the sequence: the visible ones, then zeros.
  const int64_t g_col = static_cast<int64_t>(g) * l.hd;
  for (int64_t t = 0; t < l.seq; ++t) {
    float* dk_row = gr.dk + (b * l.seq + t) * gr.dkv_stride + g_col;
    float* dv_row = gr.dv + (b * l.seq + t) * gr.dkv_stride + g_col;
    if (t >= l.kv_len) {
      std::fill(dk_row, dk_row + l.hd, 0.0f);
      std::fill(dv_row, dv_row + l.hd, 0.0f);
      continue;
    }
    if (t + kPrefetchRows < l.kv_len) {
      PrefetchFloatsForWrite(dk_row + kPrefetchRows * gr.dkv_stride, l.hd);
      PrefetchFloatsForWrite(dv_row + kPrefetchRows * gr.dkv_stride, l.hd);
    }
    std::copy(dk + t * l.hd_pad, dk + t * l.hd_pad + l.hd, dk_row);
    std::copy(dv + t * l.hd_pad, dv + t * l.hd_pad + l.hd, dv_row);
  }
}

void Forward(const Layout& l, const int32_t* segment_ids, float* out, float* lse) {
  if (l.batch <= 0 || l.q_rows <= 0) return;
  const std::vector<int32_t> starts = SegmentStarts(l, segment_ids);
  ParallelFor(l.batch * l.n_heads, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      ForwardTask(l, starts.data(), t / l.n_heads, static_cast<int>(t % l.n_heads), out, lse);
  });
}

void Backward(const Layout& l, const int32_t* segment_ids, const float* out, const float* lse, const float* dout,
              const Grads& gr) {
  if (l.batch <= 0 || l.seq <= 0) return;
  const std::vector<int32_t> starts = SegmentStarts(l, segment_ids);
  ParallelFor(l.batch * l.n_kv, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      BackwardTask(l, starts.data(), out, lse, dout, t / l.n_kv, static_cast<int>(t % l.n_kv), gr);
  });
}

// The fused qkv layout: all of the sequence's queries, keys and values in one row.
Layout FusedLayout(const AttentionShape& shape, const float* qkv) {
  Layout l(shape, 0, shape.seq);
  const int64_t hd = shape.head_dim;
  l.q = qkv;
  l.k = qkv + shape.n_heads * hd;
  l.v = qkv + (shape.n_heads + shape.n_kv_heads) * hd;
  l.q_stride = l.kv_stride = shape.qkv_stride();
  return l;
}

// A query chunk's layout: q [batch*q_len, n_heads*head_dim], kv [batch*seq, 2*n_kv*head_dim].
Layout ChunkLayout(const AttentionShape& shape, const AttentionChunk& c, const float* q, const float* kv) {
  Layout l(shape, c.q_offset, c.q_len);
  l.q = q;
  l.k = kv;
  l.v = kv + static_cast<int64_t>(shape.n_kv_heads) * shape.head_dim;
  l.q_stride = shape.out_stride();
  l.kv_stride = 2 * static_cast<int64_t>(shape.n_kv_heads) * shape.head_dim;
  return l;
}

}  // namespace

void AttentionForward(const AttentionShape& shape, const float* qkv, const int32_t* segment_ids,
                      float* out, float* lse) {
  Forward(FusedLayout(shape, qkv), segment_ids, out, lse);
}

void AttentionBackward(const AttentionShape& shape, const float* qkv, const int32_t* segment_ids,
                       const float* out, const float* lse, const float* dout, float* dqkv) {
  const int64_t hd = shape.head_dim;
  const Grads gr{dqkv, shape.qkv_stride(), dqkv + shape.n_heads * hd, dqkv + (shape.n_heads + shape.n_kv_heads) * hd,
                 shape.qkv_stride()};
  Backward(FusedLayout(shape, qkv), segment_ids, out, lse, dout, gr);
}

void AttentionChunkForward(const AttentionShape& shape, const AttentionChunk& c, const float* q, const float* kv,
                           const int32_t* segment_ids, float* out, float* lse) {
  Forward(ChunkLayout(shape, c, q, kv), segment_ids, out, lse);
}

void AttentionChunkBackward(const AttentionShape& shape, const AttentionChunk& c, const float* q, const float* kv,
                            const int32_t* segment_ids, const float* out, const float* lse, const float* dout,
                            float* dq, float* dkv) {
  const int64_t kv_width = static_cast<int64_t>(shape.n_kv_heads) * shape.head_dim;
  const Grads gr{dq, shape.out_stride(), dkv, dkv + kv_width, 2 * kv_width};
  Backward(ChunkLayout(shape, c, q, kv), segment_ids, out, lse, dout, gr);
}

}  // namespace shard::cpu
