"""JSON-lines bridge between the TypeScript ScienceWorld adapter and the official Python API.

One bridge process owns one simulator (one JVM started by `scienceworld.ScienceWorldEnv`).
It reads one JSON request per line on stdin and writes one JSON response per line on the
protocol stream:

    request:  {"id": 7, "op": "step", "action": "look around"}
    response: {"id": 7, "ok": true, "result": {...}}
              {"id": 7, "ok": false, "errorType": "ValueError", "error": "...", "fatal": false}

Before the first request it announces itself with {"event": "ready", ...} or, when the
simulator cannot start, {"event": "fatal", "error": "..."} and exits.

Everything the simulator computes goes through the official `ScienceWorldEnv` methods so that
scores, rewards, completion and valid actions are exactly what the Python API reports.
"""

import json
import os
import sys
import traceback

# The protocol owns the original stdout. Anything else that prints (py4j, the scienceworld
# package, stray debugging) is sent to stderr so it can never corrupt a response line.
_protocol = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
os.dup2(2, 1)
sys.stdout = sys.stderr


def send(message):
    _protocol.write(json.dumps(message) + "\n")
    _protocol.flush()


def announce_fatal(error):
    send({"event": "fatal", "error": error})
    sys.exit(2)


try:
    import scienceworld
    from scienceworld import ScienceWorldEnv
    from scienceworld.constants import TASKS
    from py4j.protocol import Py4JError
except ImportError as error:
    announce_fatal(
        f"the Python package 'scienceworld' is not importable by {sys.executable} ({error}). "
        "Run scripts/setup-python.sh to create the project's .venv."
    )


class SimulatorLost(Exception):
    """The JVM behind the py4j gateway is gone; this bridge cannot serve any further request."""


class SimulatorRefused(Exception):
    """py4j failed on one request, but the JVM is alive and answers: only that request failed."""


class Bridge:
    def __init__(self):
        # envStepLimit is set per episode in reset(); the constructor value is irrelevant.
        self.env = ScienceWorldEnv("", envStepLimit=100)
        self.loaded = None

    def java_pid(self):
        process = getattr(self.env._gateway, "java_process", None)
        return process.pid if process is not None else None

    def op_info(self, request):
        return {
            "scienceworldVersion": scienceworld.__version__,
            "taskNames": self.env.get_task_names(),
            "simplifications": self.env.get_possible_simplifications(),
            "javaPid": self.java_pid(),
        }

    def op_catalog(self, request):
        """Every task with its official variation splits, as the simulator computes them."""
        metadata = {entry["task_name"]: entry for entry in TASKS}
        # Loading each task below replaces any episode in progress.
        self.loaded = None
        tasks = []
        for name in self.env.get_task_names():
            # The split functions read the currently loaded task, so load each one first.
            self.env.load(name, 0, "")
            entry = metadata.get(name, {})
            tasks.append({
                "name": name,
                "id": entry.get("task_id"),
                "topic": entry.get("topic"),
                "title": entry.get("task"),
                "maxVariations": self.env.get_max_variations(name),
                "train": self.env.get_variations_train(),
                "dev": self.env.get_variations_dev(),
                "test": self.env.get_variations_test(),
            })
        return {"scienceworldVersion": scienceworld.__version__, "tasks": tasks}

    def op_reset(self, request):
        task = request["task"]
        variation = int(request["variation"])
        simplification = request.get("simplification", "")
        gold = bool(request.get("goldPath", False))
        self.env.envStepLimit = int(request["moveLimit"])
        self.env.load(task, variation, simplification, generateGoldPath=gold)
        if request.get("official", False):
            observation, info = self.env.reset()
        else:
            # The simulator's reset() is defined as load() again with the same arguments, so
            # right after load() the world is already in its reset state. Skipping that second
            # identical rebuild (and second gold-path search) halves the cost of a reset; the
            # rest is what ScienceWorldEnv.reset() does: zero the reward baseline, then make
            # 'look around' the first move. The 'official' flag keeps the slow path testable.
            self.env.lastStepScore = 0
            observation, _, _, info = self.env.step("look around")
        result = self.describe(observation, info)
        result["task"] = self.env.get_task_description()
        result["simplificationsUsed"] = self.env.get_simplifications_used()
        result["goldActions"] = self.env.get_gold_action_sequence() if gold else None
        self.loaded = (task, variation, simplification, gold)
        return result

    def op_step(self, request):
        if self.loaded is None:
            raise RuntimeError("step before reset: no task is loaded in this simulator")
        observation, reward, done, info = self.env.step(str(request["action"]))
        result = self.describe(observation, info)
        result["reward"] = reward
        result["done"] = bool(done)
        return result

    def describe(self, observation, info):
        return {
            "observation": observation,
            "score": info["score"],
            "moves": info["moves"],
            "validActions": info["valid"],
            "look": info["look"],
            "inventory": info["inv"],
            # Distinguishes the simulator's own end of task from the API's step-limit and
            # negative-score endings, which all show up as done=True.
            "simulatorCompleted": bool(self.env.server.getCompleted()),
        }

    def op_exit(self, request):
        return {}

    def handle(self, request):
        handler = getattr(self, "op_" + str(request.get("op")), None)
        if handler is None:
            raise ValueError(f"unknown bridge op {request.get('op')!r}")
        try:
            return handler(request)
        except Py4JError as error:
            # A dead JVM (killed, crashed, out of memory) surfaces as a py4j error, and so does
            # a request py4j could not send (text it cannot encode) or a Java exception from a
            # live simulator. Only the first makes this bridge useless; ask the JVM to tell.
            if not self.simulator_answers():
                raise SimulatorLost(str(error)) from error
            # py4j logs the underlying reason (e.g. a UnicodeEncodeError) on stderr and keeps
            # only this generic message.
            raise SimulatorRefused(f"the simulator could not take this request, but its JVM still answers: {error}") from error

    def simulator_answers(self):
        java = getattr(self.env._gateway, "java_process", None)
        if java is not None and java.poll() is not None:
            return False
        try:
            self.env.server.getCompleted()
            return True
        except Py4JError:
            return False

    def close(self):
        java = getattr(self.env._gateway, "java_process", None)
        try:
            self.env.close()
        except Exception:
            pass
        # Reap the JVM here: if this process exited first, the JVM would be orphaned and
        # linger until some other process collected it.
        if java is not None:
            try:
                java.wait(timeout=10)
            except Exception:
                java.kill()
                java.wait()


def main():
    try:
        bridge = Bridge()
    except Exception as error:
        announce_fatal(
            f"could not start the ScienceWorld simulator (java -jar through py4j): {error!r}. "
            "ScienceWorld needs a Java runtime 11+ on PATH (e.g. 'apt-get install openjdk-17-jre-headless')."
        )
    send({"event": "ready", "pid": os.getpid(), "javaPid": bridge.java_pid(),
          "scienceworldVersion": scienceworld.__version__})

    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        request_id = None
        try:
            request = json.loads(line)
            request_id = request.get("id")
            result = bridge.handle(request)
            send({"id": request_id, "ok": True, "result": result})
            if request.get("op") == "exit":
                break
        except SimulatorLost as error:
            send({"id": request_id, "ok": False, "fatal": True, "errorType": "SimulatorLost",
                  "error": f"the simulator JVM stopped answering: {error}"})
            os._exit(3)
        except Exception as error:
            send({"id": request_id, "ok": False, "fatal": False, "errorType": type(error).__name__,
                  "error": str(error), "traceback": traceback.format_exc(limit=5)})
    bridge.close()


if __name__ == "__main__":
    main()
