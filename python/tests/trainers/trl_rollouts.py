"""TRL's Harbor loop on denv, driven by a scripted policy; prints one JSON object.

Run in the tools image by packages/cli/src/e2e/trainers.test.ts (TRL 1.16.0, Harbor 0.26.0,
the denv package; DENV_URL and DENV_TOKEN name a live stack):

    python trl_rollouts.py PAGE WORKDIR

PAGE is docs/blog/trainers.md: its Python block that builds TRL's ``HarborSpec`` on denv runs
here as written, in WORKDIR, whose ``tasks`` folder holds Harbor task folders. What follows is
the loop ``GRPOTrainer`` runs per generation with that spec: ``environment_factory()`` ->
``reset(task_dir=...)`` -> the tool method the model calls -> ``reward_funcs(environments=...)``.
No model and no trainer: TRL's trainers need torch, which this image does not have; the policy
is the list of tool calls below (the task's own solution and a look at its result for
``solve``, none for ``nothing``).
"""

import gc
import json
import os
import re
import sys
from pathlib import Path

from trl.experimental.harbor import HarborSpec

page, workdir = Path(sys.argv[1]).read_text(), Path(sys.argv[2])
block = re.search(r"<!-- checked: [^>]*trl_rollouts\.py[^>]*-->\n```python\n(.*?)```", page, re.S)
assert block, "the HarborSpec block of docs/blog/trainers.md"
os.chdir(workdir)
namespace: dict[str, object] = {}
exec(compile(block[1], "docs/blog/trainers.md", "exec"), namespace)
spec = namespace["spec"]
assert isinstance(spec, HarborSpec)
tasks = workdir / "tasks"
task_dir = sorted(p.parent for p in tasks.glob("*/task.toml"))[0]
solution = (task_dir / "solution" / "solve.sh").read_text()
policies = {"solve": [solution, "cat /app/hello.txt"], "nothing": []}

report: dict[str, object] = {"task": task_dir.name}
envs = []
for name, calls in policies.items():
    env = spec.environment_factory()
    prompt = env.reset(task_dir=str(task_dir))
    outputs = [env.bash(command) for command in calls]
    envs.append(env)
    report[name] = {"prompt": prompt, "outputs": outputs}
report["rewards"] = spec.reward_funcs(environments=envs)

# HarborSpec's default backend is Harbor's docker: denv.trl refuses it before anything starts.
try:
    HarborSpec("tasks", agent="denv.trl:DenvHarborBashEnv").environment_factory()
except ValueError as e:
    report["refused"] = str(e)

# TRL tears an environment down when it is collected (HarborEnv.__del__ stops its sandbox).
del env, envs
gc.collect()
print(json.dumps(report))
