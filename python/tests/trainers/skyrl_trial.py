"""What SkyRL's HarborGenerator hands Harbor, on denv; prints one JSON object.

Run in the tools image by packages/cli/src/e2e/trainers.test.ts (Harbor 0.26.0 and the denv
package; DENV_URL and DENV_TOKEN name a live stack):

    python skyrl_trial.py CONFIG TASK MODEL_URL

CONFIG is the ``harbor_trial_config`` YAML a SkyRL user writes (docs/blog/trainers.md). Per
trajectory, SkyRL's generator sets ``agent.model_name`` (``hosted_vllm/<served name>``),
``agent.kwargs.api_base``, ``task.path`` and ``agent.kwargs.session_id`` on a copy of it,
validates it as Harbor's ``TrialConfig``, runs the trial and reads
``verifier_result.rewards["reward"]``. The same here, with the agent overridden as a SkyRL
user overrides any field (``++harbor_trial_config.agent.name=oracle``): Harbor's oracle and
nop agents instead of terminus-2 with a served model, which needs SkyRL's GPU stack.
"""

import asyncio
import copy
import json
import sys
import uuid
from pathlib import Path

import yaml
from harbor.models.trial.config import TrialConfig
from harbor.trial.trial import Trial

config_file, task, model_url = sys.argv[1], sys.argv[2], sys.argv[3]
template = yaml.safe_load(Path(config_file).read_text())
template.setdefault("agent", {})["model_name"] = "hosted_vllm/policy"
template["agent"].setdefault("kwargs", {})["api_base"] = f"{model_url}/v1"


async def trajectory(agent: str) -> dict[str, object]:
    config = copy.deepcopy(template)
    config["agent"]["name"] = agent
    config["task"] = {"path": task}
    config["agent"]["kwargs"]["session_id"] = uuid.uuid4().hex
    trial_config = TrialConfig.model_validate(config)
    # Harbor 0.26 refuses Trial(config) ("Use `await Trial.create(config)`").
    result = await (await Trial.create(trial_config)).run()
    return {
        "agent": agent,
        "import_path": trial_config.environment.import_path,
        "reward": result.verifier_result.rewards["reward"] if result.verifier_result else None,
        "exception": result.exception_info.exception_type if result.exception_info else None,
    }


async def main() -> None:
    print(json.dumps([await trajectory(agent) for agent in ("oracle", "nop")]))


asyncio.run(main())
