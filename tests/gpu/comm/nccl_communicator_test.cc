// CreateCommunicator("nccl") on one GPU: every collective with world size 1
// on device memory and on host memory (staged), in place and not, zero
// counts, ordering after the compute stream by event, grouped all-reduces,
// Abort, and the init timeout when a peer never joins.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "shard/comm/communicator.h"
#include "shard/common/kv_stores.h"
#include "tests/gpu/gpu_test_util.h"

namespace shard {
namespace {

using gpu_testing::Down;
using gpu_testing::Up;

const CommOptions kOpts{std::chrono::seconds(30)};

class NcclTest : public ::testing::Test {
 protected:
  void SetUp() override {
    be_ = gpu_testing::MaybeCuda(&why_);  // also makes device 0 current
    if (!be_) return;
    static int n = 0;
    CommConfig c;
    c.backend = "nccl";
    c.rank = 0;
    c.world_size = 1;
    c.store = std::make_shared<InMemoryKvStore>();
    c.prefix = "gputest/a" + std::to_string(n++) + "/";
    c.timeout = std::chrono::seconds(30);
    auto comm = CreateCommunicator(c);
    ASSERT_TRUE(comm.ok()) << comm.status().ToString();
    comm_ = std::move(comm.value());
  }
  std::string why_;
  std::unique_ptr<Backend> be_;
  std::unique_ptr<Communicator> comm_;
};

TEST_F(NcclTest, DeviceCollectivesAtWorldOne) {
  SKIP_WITHOUT_GPU(be_, why_);
  EXPECT_EQ(comm_->rank(), 0);
  EXPECT_EQ(comm_->world_size(), 1);
  EXPECT_NE(comm_->name().find("nccl:"), std::string::npos);
  const std::vector<float> x = gpu_testing::Random(1000, 1);
  DeviceBuffer a = Up(be_.get(), x), b = Up(be_.get(), std::vector<float>(1000));
  ASSERT_TRUE(comm_->AllGather(a.data(), b.data(), 1000, kOpts).ok());
  EXPECT_EQ(Down(be_.get(), b), x);
  ASSERT_TRUE(comm_->AllGather(b.data(), b.data(), 1000, kOpts).ok());  // in place
  EXPECT_EQ(Down(be_.get(), b), x);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
    DeviceBuffer out = Up(be_.get(), std::vector<float>(1000));
    ASSERT_TRUE(comm_->ReduceScatter(a.data(), out.data(), 1000, op, kOpts).ok()) << ReduceOpName(op);
    EXPECT_EQ(Down(be_.get(), out), x) << ReduceOpName(op);
    ASSERT_TRUE(comm_->AllReduce(a.data(), 1000, op, kOpts).ok());
    EXPECT_EQ(Down(be_.get(), a), x) << ReduceOpName(op);
  }
  ASSERT_TRUE(comm_->Broadcast(a.data(), 1000, 0, kOpts).ok());
  EXPECT_EQ(Down(be_.get(), a), x);
  EXPECT_TRUE(comm_->Barrier(kOpts).ok());
  EXPECT_TRUE(comm_->AllGather(a.data(), b.data(), 0, kOpts).ok());  // zero counts
  EXPECT_EQ(comm_->Broadcast(a.data(), 10, 1, kOpts).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(comm_->AllReduce(a.data(), -1, ReduceOp::kSum, kOpts).code(), StatusCode::kInvalidArgument);
}

// Mixed precision's calls: a two-byte all-gather (device and host buffers) and
// a bf16/fp16 reduce-scatter, which at world size 1 returns its input's bits.
TEST_F(NcclTest, TwoByteCollectivesAtWorldOne) {
  SKIP_WITHOUT_GPU(be_, why_);
  std::vector<uint16_t> h(1001);
  for (size_t i = 0; i < h.size(); ++i) h[i] = F32ToBF16(0.01f * static_cast<float>(i) - 3.0f);
  auto a = DeviceBuffer::Create(be_.get(), 501), b = DeviceBuffer::Create(be_.get(), 501);
  ASSERT_TRUE(a.ok() && b.ok());
  be_->CopyToDevice(a->data(), h.data(), h.size() * 2);
  std::vector<uint16_t> back(h.size());
  for (DType t : {DType::kBF16, DType::kF16}) {
    ASSERT_TRUE(comm_->AllGather(a->data(), b->data(), 1001, t, kOpts).ok()) << DTypeName(t);
    be_->CopyToHost(back.data(), b->data(), h.size() * 2);
    EXPECT_EQ(back, h) << DTypeName(t);
    ASSERT_TRUE(comm_->ReduceScatter(a->data(), b->data(), 1001, t, ReduceOp::kSum, kOpts).ok()) << DTypeName(t);
    be_->CopyToHost(back.data(), b->data(), h.size() * 2);
    EXPECT_EQ(back, h) << DTypeName(t);
  }
  std::vector<uint16_t> hr(h.size());
  ASSERT_TRUE(comm_->AllGather(h.data(), hr.data(), 1001, DType::kBF16, kOpts).ok());  // host: staged
  EXPECT_EQ(hr, h);
}

TEST_F(NcclTest, HostBuffersAreStaged) {
  SKIP_WITHOUT_GPU(be_, why_);
  double d[3] = {1.5, -2.0, 3.25};
  ASSERT_TRUE(comm_->AllReduce(d, 3, ReduceOp::kSum, kOpts).ok());
  EXPECT_EQ(d[0], 1.5);
  EXPECT_EQ(d[2], 3.25);
  std::vector<float> s = gpu_testing::Random(64, 2), r(64);
  ASSERT_TRUE(comm_->AllGather(s.data(), r.data(), 64, kOpts).ok());
  EXPECT_EQ(r, s);
  std::fill(r.begin(), r.end(), 0.0f);
  ASSERT_TRUE(comm_->ReduceScatter(s.data(), r.data(), 64, ReduceOp::kSum, kOpts).ok());
  EXPECT_EQ(r, s);
  float f = 4.0f;
  ASSERT_TRUE(comm_->Broadcast(&f, 1, 0, kOpts).ok());
  EXPECT_EQ(f, 4.0f);
  DeviceBuffer dev = Up(be_.get(), s);
  EXPECT_EQ(comm_->AllGather(dev.data(), r.data(), 64, kOpts).code(), StatusCode::kInvalidArgument)
      << "mixed device/host buffers are refused";
}

TEST_F(NcclTest, AbortFailsEveryLaterCall) {
  SKIP_WITHOUT_GPU(be_, why_);
  comm_->Abort("test says stop");
  comm_->Abort("twice is fine");
  DeviceBuffer a = Up(be_.get(), std::vector<float>(8, 1.0f));
  const auto t0 = std::chrono::steady_clock::now();
  Status st = comm_->AllReduce(a.data(), 8, ReduceOp::kSum, kOpts);
  EXPECT_EQ(st.code(), StatusCode::kAborted) << st.ToString();
  EXPECT_NE(st.message().find("test says stop"), std::string::npos) << st.ToString();
  EXPECT_EQ(comm_->Barrier(kOpts).code(), StatusCode::kAborted);
  EXPECT_EQ(comm_->AllGather(a.data(), a.data(), 0, kOpts).code(), StatusCode::kAborted);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
}

// Event ordering (CommConfig::device_stream): the collective is issued while
// the compute stream is still busy producing its input (a slow GEMM, then a
// Fill of the send buffer, all queued, nothing synchronised); it must see the
// filled values — ordered by an event recorded at issue time, or by the
// caller's CommOptions::ready_event. Then AllReduceMany: one NCCL group over
// device buffers (a zero count among them), the per-buffer loop for host ones.
TEST_F(NcclTest, CollectivesOrderAfterTheComputeStreamAndGroupAllReduces) {
  SKIP_WITHOUT_GPU(be_, why_);
  ASSERT_NE(be_->native_stream(), nullptr);
  CommConfig c;
  c.backend = "nccl";
  c.world_size = 1;
  c.store = std::make_shared<InMemoryKvStore>();
  c.prefix = "gputest/ordered/";
  c.timeout = std::chrono::seconds(30);
  c.device_stream = be_->native_stream();
  auto made = CreateCommunicator(c);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  Communicator& comm = **made;
  const int64_t n = 1 << 20, k = 2048;
  DeviceBuffer big = Up(be_.get(), gpu_testing::Random(k * k, 3));
  DeviceBuffer prod = Up(be_.get(), std::vector<float>(k * k));
  for (int caller_event = 0; caller_event < 2; ++caller_event) {
    DeviceBuffer a = Up(be_.get(), std::vector<float>(n, 1.0f)), b = Up(be_.get(), std::vector<float>(n));
    for (int i = 0; i < 4; ++i) {  // keeps the compute stream busy for a while
      GemmArgs g;
      g.m = g.n = g.k = k;
      g.a = big.data();
      g.lda = k;
      g.b = big.data();
      g.ldb = k;
      g.c = prod.data();
      g.ldc = k;
      be_->Gemm(g);
    }
    be_->Fill(a.data(), n, 7.0f);
    CommOptions o = kOpts;
    std::shared_ptr<BackendEvent> ready;
    if (caller_event) {
      ready = be_->RecordEvent();
      o.ready_event = ready->native_handle();
      ASSERT_NE(o.ready_event, nullptr);
    }
    ASSERT_TRUE(comm.AllGather(a.data(), b.data(), n, o).ok());
    const std::vector<float> got = Down(be_.get(), b);
    EXPECT_EQ(got.front(), 7.0f) << (caller_event ? "caller's event" : "event at issue");
    EXPECT_EQ(got.back(), 7.0f) << (caller_event ? "caller's event" : "event at issue");
  }
  const std::vector<float> x = gpu_testing::Random(1000, 4), y = gpu_testing::Random(77, 5);
  DeviceBuffer dx = Up(be_.get(), x), dy = Up(be_.get(), y);
  ASSERT_TRUE(comm.AllReduceMany({{dx.data(), 1000}, {dy.data(), 0}, {dy.data(), 77}}, ReduceOp::kSum, kOpts).ok());
  EXPECT_EQ(Down(be_.get(), dx), x);
  EXPECT_EQ(Down(be_.get(), dy), y);
  std::vector<float> hx = x, hy = y;
  ASSERT_TRUE(comm.AllReduceMany({{hx.data(), 1000}, {hy.data(), 77}}, ReduceOp::kMax, kOpts).ok());
  EXPECT_EQ(hx, x);
  EXPECT_EQ(hy, y);
  EXPECT_EQ(comm.AllReduceMany({{dx.data(), -1}}, ReduceOp::kSum, kOpts).code(), StatusCode::kInvalidArgument);
}

TEST(NcclInitTest, MissingPeerTimesOutAtInit) {
  std::string why;
  auto be = gpu_testing::MaybeCuda(&why);
  SKIP_WITHOUT_GPU(be, why);
  CommConfig c;
  c.backend = "nccl";
  c.rank = 0;
  c.world_size = 2;  // rank 1 never comes
  c.store = std::make_shared<InMemoryKvStore>();
  c.prefix = "gputest/lonely/";
  c.timeout = std::chrono::seconds(3);
  const auto t0 = std::chrono::steady_clock::now();
  auto comm = CreateCommunicator(c);
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), StatusCode::kDeadlineExceeded) << comm.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
}

TEST(NcclUnavailableTest, ClearErrorWithoutGpu) {
  if (NumCudaDevices() > 0) GTEST_SKIP() << "a GPU is present";
  CommConfig c;
  c.backend = "nccl";
  c.store = std::make_shared<InMemoryKvStore>();
  c.prefix = "gputest/none/";
  auto comm = CreateCommunicator(c);
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(comm.status().message().find("nccl"), std::string::npos) << comm.status().ToString();
}

}  // namespace
}  // namespace shard
