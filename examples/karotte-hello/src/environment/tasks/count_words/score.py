"""The answer key is /root_data/expected.txt, root-only: score 1.0 when the submission matches."""

import json
import sys
from pathlib import Path

if __name__ == "__main__":
    submission, output = Path(sys.argv[1]), Path(sys.argv[2])
    expected = Path("/root_data/expected.txt").read_text().strip()
    answer = submission.read_text().strip() if submission.is_file() else ""
    score = 1.0 if answer == expected else 0.0
    output.write_text(json.dumps({"score": score, "metadata": {"answer": answer}}))
