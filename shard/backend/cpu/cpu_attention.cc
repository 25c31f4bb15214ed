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

struct Layout {
  explicit Layout(const AttentionShape& s)
      : batch(s.batch),
        seq(s.seq),
        seq_pad(RoundUp(s.seq, 16)),
        n_heads(s.n_heads),
        n_kv(s.n_kv_heads),
        hd(s.head_dim),
        hd_pad(RoundUp(s.head_dim, 8)),
        group(s.n_heads / s.n_kv_heads),
        qkv_stride(s.qkv_stride()),
        out_stride(s.out_stride()),
        scale(static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim)))) {
    SHARD_CHECK_MSG(s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0,
                    "attention: n_heads must be a multiple of n_kv_heads");
  }
  // Start of head `h`'s columns (query heads, then key heads, then value heads)
  // in row 0 of sequence b.
  const float* Head(const float* qkv, int64_t b, int64_t h) const {
    return qkv + b * seq * qkv_stride + h * hd;
  }
  const float* Q(const float* qkv, int64_t b, int h) const { return Head(qkv, b, h); }
  const float* K(const float* qkv, int64_t b, int g) const { return Head(qkv, b, n_heads + g); }
  const float* V(const float* qkv, int64_t b, int g) const { return Head(qkv, b, n_heads + n_kv + g); }

  int64_t batch, seq, seq_pad;
  int n_heads, n_kv, hd, hd_pad, group;
  int64_t qkv_stride, out_stride;
  float scale;
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

// dst[seq_pad, hd_pad] = mul * src rows (stride `stride`), zero padding.
void PackRows(const Layout& l, const float* src, int64_t stride, float mul, float* dst) {
  for (int64_t t = 0; t < l.seq; ++t) {
    if (t + kPrefetchRows < l.seq) PrefetchFloats(src + (t + kPrefetchRows) * stride, l.hd);
    const float* s = src + t * stride;
    float* d = dst + t * l.hd_pad;
    for (int j = 0; j < l.hd; ++j) d[j] = mul * s[j];
    for (int j = l.hd; j < l.hd_pad; ++j) d[j] = 0.0f;
  }
  std::fill(dst + l.seq * l.hd_pad, dst + l.seq_pad * l.hd_pad, 0.0f);
}

// dst[hd, seq_pad] = transpose of src rows, zero padding.
// Row by row, so the source is read contiguously; the hd destination rows
// being filled stay in L1.
void PackTransposed(const Layout& l, const float* src, int64_t stride, float* dst) {
  for (int64_t t = 0; t < l.seq; ++t) {
    if (t + kPrefetchRows < l.seq) PrefetchFloats(src + (t + kPrefetchRows) * stride, l.hd);
    const float* s = src + t * stride;
    for (int j = 0; j < l.hd; ++j) dst[j * l.seq_pad + t] = s[j];
  }
  for (int j = 0; j < l.hd; ++j) std::fill(dst + j * l.seq_pad + l.seq, dst + (j + 1) * l.seq_pad, 0.0f);
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
  Tile(const int32_t* start, int64_t i0_, int64_t i1)
      : i0(i0_), rows(i1 - i0_), lo(start[i0_] / 16 * 16), width(RoundUp(i1, 16) - lo) {}
  // Keys (window columns) that query rows [0, r1) of the tile can see.
  int64_t KeysUpTo(int64_t r1) const { return std::min(width, RoundUp(i0 + r1, 16) - lo); }
  // First tile row that can see window column c.
  int64_t FirstRowSeeing(int64_t c) const { return std::clamp<int64_t>(lo + c - i0, 0, rows); }

  int64_t i0, rows, lo, width;
};

// out[rows, width] = a[tile rows, hd] * bt[hd, lo:lo+width] (scores, or dP).
void RowsByKeys(const Tile& t, const float* a, int64_t lda, const float* bt, int64_t ldbt, int hd,
                float* out) {
  for (int64_t r0 = 0; r0 < t.rows; r0 += kBlock) {
    const int64_t mr = std::min(kBlock, t.rows - r0);
    SmallGemm(mr, t.KeysUpTo(r0 + mr), hd, a + (t.i0 + r0) * lda, lda, 1, bt + t.lo, ldbt,
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
    SmallGemm(mc, n, t.rows - r0, p + r0 * t.width + c0, 1, t.width, b + (t.i0 + r0) * n, n,
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

void ForwardTask(const Layout& l, const float* qkv, const int32_t* starts, int64_t b, int h,
                 float* out, float* lse) {
  const int g = h / l.group;
  const int64_t tile_floats = kTileRows * l.seq_pad;
  const int64_t panel = l.seq_pad * l.hd_pad;
  ScratchCarver sc(ThreadScratch(ScratchCarver::Size(
      {panel, l.hd * l.seq_pad, panel, tile_floats, kTileRows * l.hd_pad})));
  float* q = sc.Take(panel);                 // scaled by 1/sqrt(hd): S = q k^T
  float* kt = sc.Take(l.hd * l.seq_pad);     // k transposed
  float* v = sc.Take(panel);
  float* s = sc.Take(tile_floats);           // scores, then probabilities
  float* o = sc.Take(kTileRows * l.hd_pad);  // output tile
  PackRows(l, l.Q(qkv, b, h), l.qkv_stride, l.scale, q);
  PackTransposed(l, l.K(qkv, b, g), l.qkv_stride, kt);
  PackRows(l, l.V(qkv, b, g), l.qkv_stride, 1.0f, v);
  const int32_t* start = starts + b * l.seq;
  float* lse_bh = lse + (b * l.n_heads + h) * l.seq;
  float inv_sum[kTileRows];
  const int64_t head_col = static_cast<int64_t>(h) * l.hd;

  for (int64_t i0 = 0; i0 < l.seq; i0 += kTileRows) {
    const Tile t(start, i0, std::min(l.seq, i0 + kTileRows));
    for (int64_t r = 0; r < t.rows; ++r)  // written at the end of the tile
      PrefetchFloatsForWrite(out + (b * l.seq + i0 + r) * l.out_stride + head_col, l.hd);
    RowsByKeys(t, q, l.hd_pad, kt, l.seq_pad, l.hd, s);
    for (int64_t r = 0; r < t.rows; ++r) {
      const int64_t i = i0 + r;
      float mx;
      const float sum = SoftmaxRow(s + r * t.width, start[i] - t.lo, i + 1 - t.lo, t.width, &mx);
      inv_sum[r] = 1.0f / sum;
      lse_bh[i] = mx + std::log(sum);
    }
    RowsByValues(t, s, v, l.hd_pad, o);
    for (int64_t r = 0; r < t.rows; ++r) {
      float* dst = out + (b * l.seq + i0 + r) * l.out_stride + head_col;
      const float* src = o + r * l.hd_pad;
      for (int j = 0; j < l.hd; ++j) dst[j] = src[j] * inv_sum[r];
    }
  }
}

// Backward for one (batch, kv head), recomputing P from the saved lse:
// dV += P^T dO, dP = dO V^T, dS = P * (dP - D) with D_i = dO_i . O_i,
// dQ = scale dS K, dK += scale dS^T Q (scale folded into the packed q).
void BackwardTask(const Layout& l, const float* qkv, const int32_t* starts, const float* out,
                  const float* lse, const float* dout, int64_t b, int g, float* dqkv) {
  const int64_t panel = l.seq_pad * l.hd_pad, trans = l.hd * l.seq_pad;
  const int64_t tile_floats = kTileRows * l.seq_pad;
  ScratchCarver sc(ThreadScratch(ScratchCarver::Size({panel, trans, trans, panel, panel, panel,
                                                      panel, l.seq_pad, tile_floats, tile_floats,
                                                      kTileRows * l.hd_pad})));
  float* k = sc.Take(panel);
  float* kt = sc.Take(trans);
  float* vt = sc.Take(trans);
  float* dk = sc.Take(panel);
  float* dv = sc.Take(panel);
  float* q = sc.Take(panel);  // scaled
  float* dout_h = sc.Take(panel);
  float* delta = sc.Take(l.seq_pad);
  float* p = sc.Take(tile_floats);
  float* ds = sc.Take(tile_floats);
  float* dq = sc.Take(kTileRows * l.hd_pad);
  PackRows(l, l.K(qkv, b, g), l.qkv_stride, 1.0f, k);
  PackTransposed(l, l.K(qkv, b, g), l.qkv_stride, kt);
  PackTransposed(l, l.V(qkv, b, g), l.qkv_stride, vt);
  std::fill(dk, dk + panel, 0.0f);
  std::fill(dv, dv + panel, 0.0f);
  const int32_t* start = starts + b * l.seq;

  for (int h = g * l.group; h < (g + 1) * l.group; ++h) {
    PackRows(l, l.Q(qkv, b, h), l.qkv_stride, l.scale, q);
    const int64_t head_col = static_cast<int64_t>(h) * l.hd;
    PackRows(l, dout + b * l.seq * l.out_stride + head_col, l.out_stride, 1.0f, dout_h);
    for (int64_t t = 0; t < l.seq; ++t) {
      if (t + kPrefetchRows < l.seq)
        PrefetchFloats(out + (b * l.seq + t + kPrefetchRows) * l.out_stride + head_col, l.hd);
      const float* o_t = out + (b * l.seq + t) * l.out_stride + head_col;
      const float* do_t = dout_h + t * l.hd_pad;
      float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
      for (int j = 0; j < l.hd; ++j) acc += do_t[j] * o_t[j];
      delta[t] = acc;
    }
    const float* lse_bh = lse + (b * l.n_heads + h) * l.seq;

    for (int64_t i0 = 0; i0 < l.seq; i0 += kTileRows) {
      const Tile t(start, i0, std::min(l.seq, i0 + kTileRows));
      for (int64_t r = 0; r < t.rows; ++r)  // dQ rows, written after the products below
        PrefetchFloatsForWrite(dqkv + (b * l.seq + i0 + r) * l.qkv_stride + head_col, l.hd);
      RowsByKeys(t, q, l.hd_pad, kt, l.seq_pad, l.hd, p);
      RowsByKeys(t, dout_h, l.hd_pad, vt, l.seq_pad, l.hd, ds);
      for (int64_t r = 0; r < t.rows; ++r) {
        const int64_t i = i0 + r, a = start[i] - t.lo, e = i + 1 - t.lo;
        float* pr = p + r * t.width;
        float* dsr = ds + r * t.width;
        const float m = lse_bh[i], d = delta[i];
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
      // dQ rows of this tile are complete after one product: write them out.
      RowsByValues(t, ds, k, l.hd_pad, dq);
      for (int64_t r = 0; r < t.rows; ++r) {
        float* dst = dqkv + (b * l.seq + i0 + r) * l.qkv_stride + head_col;
        const float* src = dq + r * l.hd_pad;
        for (int j = 0; j < l.hd; ++j) dst[j] = l.scale * src[j];
      }
      KeysByRows(t, ds, q, l.hd_pad, dk);
      KeysByRows(t, p, dout_h, l.hd_pad, dv);
    }
  }

  const int64_t k_col = static_cast<int64_t>(l.n_heads + g) * l.hd;
  const int64_t v_col = static_cast<int64_t>(l.n_heads + l.n_kv + g) * l.hd;
  for (int64_t t = 0; t < l.seq; ++t) {
    if (t + kPrefetchRows < l.seq) {
      float* ahead = dqkv + (b * l.seq + t + kPrefetchRows) * l.qkv_stride;
      PrefetchFloatsForWrite(ahead + k_col, l.hd);
      PrefetchFloatsForWrite(ahead + v_col, l.hd);
    }
    float* row = dqkv + (b * l.seq + t) * l.qkv_stride;
    std::copy(dk + t * l.hd_pad, dk + t * l.hd_pad + l.hd, row + k_col);
    std::copy(dv + t * l.hd_pad, dv + t * l.hd_pad + l.hd, row + v_col);
  }
}

}  // namespace

void AttentionForward(const AttentionShape& shape, const float* qkv, const int32_t* segment_ids,
                      float* out, float* lse) {
  const Layout l(shape);
  if (l.batch <= 0 || l.seq <= 0) return;
  const std::vector<int32_t> starts = SegmentStarts(l, segment_ids);
  ParallelFor(l.batch * l.n_heads, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      ForwardTask(l, qkv, starts.data(), t / l.n_heads, static_cast<int>(t % l.n_heads), out, lse);
  });
}

void AttentionBackward(const AttentionShape& shape, const float* qkv, const int32_t* segment_ids,
                       const float* out, const float* lse, const float* dout, float* dqkv) {
  const Layout l(shape);
  if (l.batch <= 0 || l.seq <= 0) return;
  const std::vector<int32_t> starts = SegmentStarts(l, segment_ids);
  ParallelFor(l.batch * l.n_kv, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      BackwardTask(l, qkv, starts.data(), out, lse, dout, t / l.n_kv, static_cast<int>(t % l.n_kv),
                   dqkv);
  });
}

}  // namespace shard::cpu
