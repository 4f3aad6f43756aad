// The in-process CPU communicator: results, layout, determinism (rank-order
// sums whatever the timing), call mismatches and abort.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <thread>

#include "runtime/communicator.h"

namespace ferrite {
namespace {

// Runs fn(rank, comm) on one thread per rank; returns each rank's status.
std::vector<Status> run_ranks(std::vector<std::unique_ptr<Communicator>>& comms,
                              const std::function<Status(int, Communicator&)>& fn) {
  std::vector<Status> st(comms.size(), Status::ok());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r)
    threads.emplace_back([&, r] { st[r] = fn(static_cast<int>(r), *comms[r]); });
  for (auto& t : threads) t.join();
  return st;
}

std::vector<std::unique_ptr<Communicator>> group(int n) {
  auto g = make_cpu_communicators(n);
  EXPECT_TRUE(g.is_ok()) << g.status().message();
  return std::move(g).value();
}

// Values whose sum depends on the order of the additions.
float value(int rank, int64_t i) {
  const float big[] = {1e8f, 3.0f, -1e8f, 0.1f};
  return big[(rank + i) % 4] * (1.0f + 0.001f * static_cast<float>(i % 7));
}

TEST(CpuCommunicator, AllReduceSumsInRankOrderOnEveryRank) {
  for (int n : {1, 2, 3, 4}) {
    auto comms = group(n);
    ASSERT_EQ(comms.size(), static_cast<size_t>(n));
    const int64_t count = 1001;  // not a multiple of the world size
    std::vector<std::vector<float>> bufs(n, std::vector<float>(count)), init(n);
    for (int r = 0; r < n; ++r)
      for (int64_t i = 0; i < count; ++i) init[r].push_back(value(r, i));
    for (int repeat = 0; repeat < 20; ++repeat) {
      for (int r = 0; r < n; ++r)
        bufs[r] = init[r];
      std::mt19937 rng(repeat);
      std::vector<int> delay_us(n);
      for (int& d : delay_us) d = static_cast<int>(rng() % 300);
      auto st = run_ranks(comms, [&](int r, Communicator& c) {
        EXPECT_EQ(c.rank(), r);
        EXPECT_EQ(c.world_size(), n);
        std::this_thread::sleep_for(std::chrono::microseconds(delay_us[r]));
        return c.all_reduce_sum(bufs[r].data(), count, DType::kF32, nullptr);
      });
      for (int r = 0; r < n; ++r) ASSERT_TRUE(st[r].is_ok()) << st[r].message();
      for (int64_t i = 0; i < count; ++i) {
        float want = init[0][i];
        for (int r = 1; r < n; ++r) want += init[r][i];
        for (int r = 0; r < n; ++r)
          ASSERT_EQ(std::memcmp(&bufs[r][i], &want, 4), 0)
              << "n " << n << " rank " << r << " element " << i << ": " << bufs[r][i]
              << " != " << want;
      }
    }
  }
}

TEST(CpuCommunicator, AllReduceBf16RoundsTheF32SumOnce) {
  auto comms = group(3);
  const int64_t count = 64;
  std::vector<std::vector<uint16_t>> bufs(3, std::vector<uint16_t>(count));
  for (int r = 0; r < 3; ++r)
    for (int64_t i = 0; i < count; ++i) bufs[r][i] = f32_to_bf16(0.37f * (r + 1) + i);
  std::vector<uint16_t> want(count);
  for (int64_t i = 0; i < count; ++i) {
    float s = bf16_to_f32(bufs[0][i]) + bf16_to_f32(bufs[1][i]);
    want[i] = f32_to_bf16(s + bf16_to_f32(bufs[2][i]));
  }
  auto st = run_ranks(comms, [&](int r, Communicator& c) {
    return c.all_reduce_sum(bufs[r].data(), count, DType::kBF16, nullptr);
  });
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(st[r].is_ok()) << st[r].message();
    EXPECT_EQ(bufs[r], want);
  }
}

TEST(CpuCommunicator, AllGatherConcatenatesRowsInRankOrder) {
  const int n = 4;
  auto comms = group(n);
  const int64_t rows = 3, count = 5;
  std::vector<std::vector<float>> send(n), recv(n, std::vector<float>(rows * n * count, -1));
  for (int r = 0; r < n; ++r)
    for (int64_t i = 0; i < rows * count; ++i) send[r].push_back(100.0f * r + i);
  // Twice in a row: the second call must not see the first's buffers.
  for (int round = 0; round < 2; ++round) {
    auto st = run_ranks(comms, [&](int r, Communicator& c) {
      return c.all_gather(send[r].data(), recv[r].data(), rows, count, DType::kF32, nullptr);
    });
    for (int r = 0; r < n; ++r) ASSERT_TRUE(st[r].is_ok()) << st[r].message();
    for (int r = 0; r < n; ++r)
      for (int64_t row = 0; row < rows; ++row)
        for (int q = 0; q < n; ++q)
          for (int64_t j = 0; j < count; ++j)
            ASSERT_EQ(recv[r][(row * n + q) * count + j], 100.0f * q + row * count + j)
                << "rank " << r << " row " << row << " from " << q;
  }
}

TEST(CpuCommunicator, BroadcastCopiesTheRootsBuffer) {
  auto comms = group(3);
  std::vector<std::vector<int32_t>> bufs(3, std::vector<int32_t>(10));
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < 10; ++i) bufs[r][i] = r * 1000 + i;
  auto st = run_ranks(comms, [&](int r, Communicator& c) {
    return c.broadcast(bufs[r].data(), 10, DType::kI32, 1, nullptr);
  });
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(st[r].is_ok()) << st[r].message();
    for (int i = 0; i < 10; ++i) EXPECT_EQ(bufs[r][i], 1000 + i);
  }
}

TEST(CpuCommunicator, MismatchedCallsFailEveryRank) {
  auto comms = group(2);
  std::vector<float> a(8, 1), b(8, 1);
  auto st = run_ranks(comms, [&](int r, Communicator& c) {
    return c.all_reduce_sum(r == 0 ? a.data() : b.data(), r == 0 ? 8 : 7, DType::kF32, nullptr);
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(st[r].is_ok());
    EXPECT_NE(st[r].message().find("collective mismatch"), std::string::npos) << st[r].message();
    EXPECT_NE(st[r].message().find("count 7"), std::string::npos) << st[r].message();
  }
  EXPECT_EQ(a[0], 1.0f);  // nothing was reduced
}

TEST(CpuCommunicator, AbortWakesWaitingRanks) {
  auto comms = group(3);
  std::vector<float> buf(4, 1);
  auto st = run_ranks(comms, [&](int r, Communicator& c) -> Status {
    if (r == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      c.abort();  // rank 2 failed before the collective
      return internal_error("rank 2 failed");
    }
    return c.all_reduce_sum(buf.data(), 4, DType::kF32, nullptr);
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(st[r].is_ok());
    EXPECT_EQ(st[r].code(), StatusCode::kCancelled) << st[r].message();
  }
  // Later collectives of the group fail at once.
  EXPECT_FALSE(comms[0]->broadcast(buf.data(), 4, DType::kF32, 0, nullptr).is_ok());
}

TEST(CpuCommunicator, BadArguments) {
  EXPECT_FALSE(make_cpu_communicators(0).is_ok());
  EXPECT_FALSE(make_cpu_communicators(kMaxTensorParallel + 1).is_ok());
  auto comms = group(1);
  std::vector<uint32_t> ids(4);
  Status s = comms[0]->all_reduce_sum(ids.data(), 4, DType::kU32, nullptr);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("summable"), std::string::npos) << s.message();
  EXPECT_FALSE(comms[0]->broadcast(ids.data(), 4, DType::kU32, 1, nullptr).is_ok());
  std::vector<float> both(8);
  EXPECT_FALSE(comms[0]->all_gather(both.data(), both.data() + 2, 1, 4, DType::kF32, nullptr)
                   .is_ok());  // overlapping buffers
}

}  // namespace
}  // namespace ferrite
