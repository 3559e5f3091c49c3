#!/usr/bin/env python3
"""A SageMaker-contract training script: what `train` runs in
quartermaster/pytorch-trainer (examples/pytorch/build-image.sh).

It follows the training-container contract as SageMaker defines it, so the
same image runs on SageMaker and on Quartermaster unchanged:
- hyperparameters from /opt/ml/input/config/hyperparameters.json (strings);
- the cluster from resourceconfig.json (current_host, hosts) and the
  launcher variables (MASTER_ADDR, MASTER_PORT, NNODES, NODE_RANK,
  NPROC_PER_NODE); started without torchrun's variables, it starts itself
  under torchrun (torch.distributed.run), one process per node;
- input channels from /opt/ml/input/data/<channel> (a channel "train" with
  files of numbers, if given, shifts the data: it proves the channel
  arrived);
- checkpoints in /opt/ml/checkpoints (rank 0 writes them atomically:
  temp file, then rename; qm-checkpoint.json last), resumed from there;
- the model in /opt/ml/model (model.pt, params.json, losses.json) on success;
- on failure, the reason in /opt/ml/output/failure and a non-zero exit.

Training is a small MLP on regression data generated from (seed, step,
rank), with gradients averaged across nodes by DistributedDataParallel over
gloo: a resumed run computes exactly what an uninterrupted one does.

Hyperparameters: steps (200), checkpoint_every (20), seed (7),
step_seconds (0: pause per step, to make a run long enough to preempt),
lr (0.05), fail_at_step (none: write a failure and exit 3 at that step).
"""
import hashlib
import json
import os
import signal
import sys
import time

ML = os.environ.get("SM_ML_ROOT", "/opt/ml")
CONFIG = os.path.join(ML, "input", "config")
CHECKPOINTS = os.environ.get("QM_CHECKPOINT_DIR", os.path.join(ML, "checkpoints"))
MODEL = os.path.join(ML, "model")
FAILURE = os.path.join(ML, "output", "failure")


def read_json(name, default):
    path = os.path.join(CONFIG, name)
    if not os.path.exists(path):
        return default
    with open(path) as f:
        return json.load(f)


def fail(message, code=3):
    os.makedirs(os.path.dirname(FAILURE), exist_ok=True)
    with open(FAILURE, "w") as f:
        f.write(message)
    print("training failed: " + message, file=sys.stderr, flush=True)
    sys.exit(code)


def under_torchrun():
    """Starts this script again under torchrun, one process on this node,
    as a SageMaker PyTorch container does; returns its exit code."""
    resource = read_json("resourceconfig.json", {"hosts": ["algo-1"], "current_host": "algo-1"})
    hosts = resource.get("hosts", ["algo-1"])
    nnodes = os.environ.get("NNODES", str(len(hosts)))
    node_rank = os.environ.get("NODE_RANK", str(hosts.index(resource.get("current_host", hosts[0]))))
    master = os.environ.get("MASTER_ADDR", hosts[0])
    port = os.environ.get("MASTER_PORT", "29500")
    argv = [
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes", nnodes, "--node_rank", node_rank, "--nproc_per_node", "1",
        "--master_addr", master, "--master_port", port,
        # Debian's torch 1.13 under Python 3.11 cannot read the default
        # "0" for these (enum.IntFlag no longer lists a zero member); the
        # per-rank form means the same here: rank 0's stdout also to the
        # console, stderr untouched.
        "--redirects", "0:1", "--tee", "0:1",
        os.path.abspath(__file__),
    ]
    print("launching: " + " ".join(argv), flush=True)
    os.execv(sys.executable, argv)


def main():
    if "LOCAL_RANK" not in os.environ:
        under_torchrun()
    import torch
    import torch.distributed as dist

    hps = read_json("hyperparameters.json", {})
    for k, v in hps.items():
        if not isinstance(v, str):
            fail("hyperparameter %s is %r, not a string as SageMaker writes them" % (k, v))
    steps = int(hps.get("steps", "200"))
    every = int(hps.get("checkpoint_every", "20"))
    seed = int(hps.get("seed", "7"))
    pause = float(hps.get("step_seconds", "0"))
    lr = float(hps.get("lr", "0.05"))
    fail_at = int(hps["fail_at_step"]) if "fail_at_step" in hps else None

    # Input channels, as the contract lays them out.
    channels = read_json("inputdataconfig.json", {})
    shift = 0.0
    train_dir = os.path.join(ML, "input", "data", "train")
    if "train" in channels and os.path.isdir(train_dir):
        for folder, _, files in sorted(os.walk(train_dir)):
            for name in sorted(files):
                with open(os.path.join(folder, name)) as f:
                    shift += sum(float(x) for x in f.read().split())
    print("channels: %s; train shift %.3f" % (sorted(channels), shift), flush=True)

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    target = torch.randn(16, generator=torch.Generator().manual_seed(seed + 1))

    start, losses = 0, []
    ckpt = os.path.join(CHECKPOINTS, "ckpt.pt")
    if os.path.exists(ckpt):
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start, losses = state["step"], state["losses"]
        print("resumed from step %d" % start, flush=True)

    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))

    def save(step):
        if rank != 0:
            return
        os.makedirs(CHECKPOINTS, exist_ok=True)
        tmp = os.path.join(CHECKPOINTS, ".ckpt.tmp")
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                    "step": step, "losses": losses}, tmp)
        os.replace(tmp, ckpt)
        tmp = os.path.join(CHECKPOINTS, ".step.tmp")
        with open(tmp, "w") as f:
            json.dump({"step": step}, f)
        os.replace(tmp, os.path.join(CHECKPOINTS, "qm-checkpoint.json"))

    for step in range(start, steps):
        if stop["now"]:
            print("SIGTERM at step %d" % step, flush=True)
            sys.exit(143)
        if fail_at is not None and step == fail_at:
            fail("diverged at step %d: the loss is not finite (a deliberate failure, fail_at_step)" % step)
        g = torch.Generator().manual_seed(seed * 1_000_003 + step * 1_009 + rank)
        x = torch.randn(32, 16, generator=g)
        y = (x @ target).unsqueeze(1) + shift + 0.01 * torch.randn(32, 1, generator=g)
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        losses.append(float(total) / world)
        if (step + 1) % every == 0:
            save(step + 1)
            print("step %d loss %.6f (checkpoint)" % (step + 1, losses[-1]), flush=True)
        if pause:
            time.sleep(pause)

    if rank == 0:
        os.makedirs(MODEL, exist_ok=True)
        torch.save(model.state_dict(), os.path.join(MODEL, "model.pt"))
        params = {k: v.flatten().tolist() for k, v in model.state_dict().items()}
        digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()
        with open(os.path.join(MODEL, "params.json"), "w") as f:
            json.dump({"digest": digest, "steps": steps, "world": world,
                       "hyperparameters": hps, "shift": shift}, f)
        with open(os.path.join(MODEL, "losses.json"), "w") as f:
            json.dump(losses, f)
        print("final digest %s after %d steps on %d node(s)" % (digest, steps, world), flush=True)
        # What a resume drill compares (Quartermaster's $QM_RESULT_FILE,
        # /opt/ml/output/result in a container).
        result = os.environ.get("QM_RESULT_FILE")
        if result:
            with open(result, "w") as f:
                f.write(digest + "\n")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # the contract: say why in /opt/ml/output/failure
        fail("%s: %s" % (type(e).__name__, e), code=1)
