"""Promise (issue 33.1): the README's quick start runs as written, and a second run
resumes from the checkpoint the first one left (the buffer's items and RNG of then)."""

import subprocess
import sys

from readme_blocks import block


def quickstart():
    return block("quickstart")


def test_the_readme_quick_start_runs_and_resumes(tmp_path):
    code = quickstart()
    assert len(code.strip().splitlines()) <= 30, "a quick start, not a program"
    check = (
        "\nimport replaystore as rs, pickle\n"
        "b = rs.ReplayBuffer.open('dqn-buffer')\n"
        "ck = pickle.load(open('ckpt.pkl', 'rb'))\n"
        "print(len(b), ck['step'], len(b.snapshots()), b.stats()['recovered'])\n"
    )
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", code + check], cwd=tmp_path,
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        *said, last = out.stdout.splitlines()
        runs.append((said, last.split()))
    # First run: 2,000 steps, checkpoints every 500 (3 kept). Second: resumed at 2,000.
    assert runs[0][1] == ["2000", "2000", "3", "None"]
    assert runs[1][1] == ["4000", "4000", "3", "None"]
    # One line per checkpoint, the resumed run's going on from the first's: draws begin
    # at 256 items (1,745 steps of 256 draws by step 2,000).
    for (said, _), first in zip(runs, (500, 2500)):
        steps = [int(line.split(":")[0].split()[1]) for line in said]
        assert steps == [first, first + 500, first + 1000, first + 1500], said
        assert all("checkpoint" in line and "items" in line for line in said), said
    assert runs[0][0][-1] == "step 2000: checkpoint; 2000 items, 446720 drawn"
