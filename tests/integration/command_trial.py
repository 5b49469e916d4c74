"""A command trial in Python, run as a program (not imported): its params say how to misbehave."""

import json
import os
import sys

params = json.load(sys.stdin)
mode = params["mode"]
if mode == "file":  # params from the file named in the environment, same as stdin
    with open(os.environ["TRAINGUARD_PARAMS_FILE"]) as fh:
        print("TRAINGUARD_RESULT " + json.dumps({"from_file": json.load(fh)}))
elif mode == "exit3":
    print("bad things happened", file=sys.stderr)
    sys.exit(3)
elif mode == "no_result":
    print("done, but no result line")
elif mode == "malformed":
    print("TRAINGUARD_RESULT {loss: 0.1")
elif mode == "flood":
    line = "x" * 1000 + "\n"
    for _ in range(30_000):  # 30 MB of output, then the result
        sys.stdout.write(line)
    print("TRAINGUARD_RESULT " + json.dumps({"flooded": True}))
elif mode == "huge":
    print("TRAINGUARD_RESULT " + json.dumps({"blob": "y" * 2_000_000}))
elif mode == "ok":
    print("TRAINGUARD_RESULT " + json.dumps({"x2": params.get("x", 0) * 2}))
