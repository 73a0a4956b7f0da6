// Worker exits kept until the scheduler acknowledges them, and the reports
// built from a worker's end (exit_book.h).
#include <gtest/gtest.h>

#include "exit_book.h"

namespace aryl::agent {
namespace {

namespace p = aryl::protocol;

p::WorkerExited Exit(p::JobId job, p::WorkerId worker, int code) {
  ExitInfo ex;
  ex.exit_code = code;
  return ExitReport("a1", job, worker, 1, ex, false, std::nullopt);
}

// Unacknowledged exits are resent every kResendSeconds until acknowledged.
TEST(ExitBook, ResendsEveryFewSecondsUntilAcknowledged) {
  ExitBook book;
  EXPECT_TRUE(book.DueForResend(100).empty());  // nothing to send
  book.Add(Exit(1, 2, 0));
  book.Add(Exit(1, 3, 1));
  EXPECT_EQ(book.DueForResend(100).size(), 2u);
  EXPECT_TRUE(book.DueForResend(100 + ExitBook::kResendSeconds / 2).empty());
  book.Acked(1, 2);
  auto again = book.DueForResend(100 + ExitBook::kResendSeconds);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].worker, 3);
  book.Acked(1, 3);
  EXPECT_TRUE(book.empty());
  EXPECT_TRUE(book.Unacked().empty());
}

// A worker's later exit replaces its earlier one; registrations carry all.
TEST(ExitBook, OneExitPerWorker) {
  ExitBook book;
  book.Add(Exit(1, 2, 1));
  book.Add(Exit(1, 2, 3));
  book.Add(Exit(4, 2, 0));
  auto all = book.Unacked();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].exit_code, 3);
  EXPECT_EQ(all[1].job, 4);
}

// A signal is reported instead of the exit code; the runtime's WorkerDone
// supplies the outcome and step.
TEST(ExitReport, SignalRuntimeAndOutcome) {
  ExitInfo killed;
  killed.signal = 9;
  killed.exit_code = 137;
  p::WorkerDone done;
  done.outcome = "stopped";
  done.step = 42;
  auto m = ExitReport("a1", 5, 6, 2, killed, true, done);
  EXPECT_EQ(m.agent_id, "a1");
  EXPECT_EQ(m.job, 5);
  EXPECT_EQ(m.worker, 6);
  EXPECT_EQ(m.generation, 2);
  EXPECT_EQ(m.signal, 9);
  EXPECT_FALSE(m.exit_code.has_value());
  EXPECT_TRUE(m.runtime);
  EXPECT_EQ(m.outcome, "stopped");
  EXPECT_EQ(m.step, 42);
  EXPECT_TRUE(m.Validate().ok());

  auto plain = Exit(5, 6, 0);
  EXPECT_EQ(plain.exit_code, 0);
  EXPECT_FALSE(plain.signal.has_value());
  EXPECT_EQ(plain.outcome, "");
  EXPECT_FALSE(plain.step.has_value());
}

// A worker that could not start exits 127 with the reason.
TEST(ExitReport, LaunchFailure) {
  auto m = LaunchFailure("a1", 5, 6, 2, "no such file");
  EXPECT_EQ(m.exit_code, 127);
  EXPECT_EQ(m.error, "no such file");
  EXPECT_TRUE(m.Validate().ok());
}

}  // namespace
}  // namespace aryl::agent
