#!/usr/bin/env python3
"""Kills a checkpointing `headroom train` at random moments and resumes it.

    kill_resume.py KILLS WORKDIR -- headroom train MODEL ... (training flags)

First runs the command once uninterrupted (with --save and --log), then runs
it again with --checkpoint WORKDIR/ck --checkpoint-every 1, sending SIGKILL
at a random moment (startup, a step, the middle of a checkpoint write) and
restarting with --resume until KILLS kills have landed on a live process,
then lets it finish. The two saved models must be byte-identical and the two
logs must give the same loss at every step. Standard library only; the
random delays come from a fixed seed, so a failure replays.
"""
import json
import os
import random
import signal
import subprocess
import sys
import time


def steps_logged(path):
    """Lines of a log (a killed run may have cut the last one short)."""
    if not os.path.exists(path):
        return 0
    with open(path) as f:
        return sum(1 for line in f if line.endswith("\n"))


def main():
    kills_wanted = int(sys.argv[1])
    work = sys.argv[2]
    assert sys.argv[3] == "--"
    cmd = sys.argv[4:]
    os.makedirs(work, exist_ok=True)
    ref_model = os.path.join(work, "uninterrupted.onnx")
    ref_log = os.path.join(work, "uninterrupted.jsonl")
    out_model = os.path.join(work, "resumed.onnx")
    out_log = os.path.join(work, "resumed.jsonl")
    ck = os.path.join(work, "ck")

    start = time.monotonic()
    subprocess.run(cmd + ["--save", ref_model, "--log", ref_log,
                          "--checkpoint", os.path.join(work, "ck-timing"),
                          "--checkpoint-every", "1"],
                   check=True, stderr=subprocess.DEVNULL)
    full = time.monotonic() - start

    rng = random.Random(20261203)
    kills, starts, progress = 0, 0, []
    run = cmd + ["--save", out_model, "--log", out_log, "--checkpoint", ck,
                 "--checkpoint-every", "1"]
    while True:
        args = list(run)
        if os.path.exists(os.path.join(ck, "checkpoint.hrc")):
            args += ["--resume", ck]
        starts += 1
        if starts > 50 * kills_wanted:
            sys.exit("kill_resume: no progress after %d starts" % starts)
        p = subprocess.Popen(args, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
        if kills < kills_wanted:
            progress.append(steps_logged(out_log))
            # Anywhere in a stretch of the run; some kills land in startup.
            time.sleep(rng.uniform(0, full / 6))
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()
                kills += 1
                continue
        err = p.communicate()[1]
        if p.returncode != 0:
            sys.exit("kill_resume: a resumed run failed (exit %d):\n%s"
                     % (p.returncode, err))
        if kills >= kills_wanted:
            break

    with open(ref_model, "rb") as a, open(out_model, "rb") as b:
        if a.read() != b.read():
            sys.exit("kill_resume: the resumed run's weights differ from the "
                     "uninterrupted run's")

    def losses(path):
        with open(path) as f:
            return [(r["step"], r["loss"]) for r in map(json.loads, f)]

    if losses(ref_log) != losses(out_log):
        sys.exit("kill_resume: the logs differ:\n%s\n%s"
                 % (losses(ref_log), losses(out_log)))
    leftovers = [f for f in os.listdir(ck) if f != "checkpoint.hrc"]
    print("kill_resume: %d kills in %d starts; weights identical, %d log lines "
          "identical; temporaries left: %d\nsteps logged at each start: %s"
          % (kills, starts, len(losses(ref_log)), len(leftovers),
             " ".join(map(str, progress))))


if __name__ == "__main__":
    main()
