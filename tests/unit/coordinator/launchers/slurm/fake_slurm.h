// Shell-script stand-ins for the Slurm commands, for tests without Slurm:
// <dir>/bin/{sbatch,scontrol,squeue,scancel,sacct} each append their argv,
// SHARDD_WORKER_TOKEN, cwd and SHARDD_TOKEN to <dir>/<name>.calls, then print
// <dir>/<name>.out (stdout) and <dir>/<name>.err (stderr) and exit with the
// code in <dir>/<name>.rc — files the test rewrites whenever Slurm's answer
// should change. sbatch answers "42" until told otherwise.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>

#include "coordinator/launchers/slurm/slurm_launcher.h"
#include "tests/unit/coordinator/coordinator_test_util.h"

namespace shardd::testing {

class FakeSlurm {
 public:
  explicit FakeSlurm(std::string dir) : dir_(std::move(dir)) {
    for (const char* name : {"sbatch", "scontrol", "squeue", "scancel", "sacct"}) {
      const std::string path = dir_ + "/bin/" + name;
      WriteBytes(path,
                 "#!/bin/sh\n"
                 "d='" + dir_ + "'\n"
                 "n=" + name + "\n"
                 "{ printf 'argv:'; for a in \"$@\"; do printf ' [%s]' \"$a\"; done; printf '\\n'\n"
                 "  printf 'token:%s\\n' \"${SHARDD_WORKER_TOKEN:-}\"; printf 'cwd:%s\\n' \"$(pwd)\"\n"
                 "  printf 'admin:[%s]\\n' \"${SHARDD_TOKEN:-}\"\n"
                 "  printf 'tls:[%s|%s|%s]\\n' \"${SHARDD_TLS_CA:-}\" \"${SHARDD_TLS_CERT:-}\" "
                 "\"${SHARDD_TLS_KEY:-}\"; } >> \"$d/$n.calls\"\n"
                 "[ -f \"$d/$n.err\" ] && cat \"$d/$n.err\" >&2\n"
                 "[ -f \"$d/$n.out\" ] && cat \"$d/$n.out\"\n"
                 "rc=0; [ -f \"$d/$n.rc\" ] && rc=$(cat \"$d/$n.rc\")\n"
                 "exit $rc\n");
      EXPECT_EQ(::chmod(path.c_str(), 0755), 0) << path;
    }
    Answer("sbatch", "42\n");
  }

  SlurmLauncherOptions Options() const {
    SlurmLauncherOptions o;
    o.sbatch = dir_ + "/bin/sbatch";
    o.scontrol = dir_ + "/bin/scontrol";
    o.squeue = dir_ + "/bin/squeue";
    o.scancel = dir_ + "/bin/scancel";
    o.sacct = dir_ + "/bin/sacct";
    o.command_timeout_s = 10;
    return o;
  }

  // What the stand-in for `name` prints and exits with from now on.
  void Answer(const std::string& name, const std::string& out, int rc = 0, const std::string& err = "") {
    WriteBytes(dir_ + "/" + name + ".out", out);
    WriteBytes(dir_ + "/" + name + ".rc", std::to_string(rc));
    WriteBytes(dir_ + "/" + name + ".err", err);
  }
  // `scontrol show job -o` from now on says this about job `id`.
  void Scontrol(const std::string& state, const std::string& exit_code = "0:0", int restarts = 0,
                const std::string& reason = "None", const std::string& id = "42") {
    Answer("scontrol", "JobId=" + id + " JobName=shardd-tiny-1-a1 UserId=alice(1000) JobState=" + state +
                           " Reason=" + reason + " Dependency=(null) Requeue=1 Restarts=" + std::to_string(restarts) +
                           " BatchFlag=1 ExitCode=" + exit_code + " NodeList=node01\n");
  }
  std::string Calls(const std::string& name) const { return ReadBytes(dir_ + "/" + name + ".calls"); }
  int CountCalls(const std::string& name) const {
    const std::string c = Calls(name);
    int n = 0;
    for (size_t p = c.find("argv:"); p != std::string::npos; p = c.find("argv:", p + 1)) ++n;
    return n;
  }
  // The SHARDD_WORKER_TOKEN the last sbatch saw.
  std::string LastSbatchToken() const {
    const std::string c = Calls("sbatch");
    const size_t p = c.rfind("token:");
    return p == std::string::npos ? "" : c.substr(p + 6, c.find('\n', p) - p - 6);
  }

 private:
  std::string dir_;
};

}  // namespace shardd::testing
