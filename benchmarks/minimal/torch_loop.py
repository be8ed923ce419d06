"""The minimal PyTorch loop (benchmarks/minimal/common.py): what a user would time by hand."""
import time

import torch
import torch.nn.functional as F

from benchmarks.minimal import common
from trainers.common.recipe import LEARNING_RATE, MOMENTUM, WEIGHT_DECAY
from trainers.torch.models import build


def main():
    args = common.parse("torch")
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    if args.forward_only:
        return infer(args)
    model = build(args.model, args.input_shape, args.classes, args.network).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM,
                                weight_decay=WEIGHT_DECAY)
    # a sequence network's labels, one per position, flat as its scores (as the trainer has them)
    batches = [(torch.from_numpy(x), torch.from_numpy(y).reshape(-1)) for x, y in common.host_batches(args)]
    times = []
    for i in range(args.steps):
        images, labels = batches[i % len(batches)]
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        value = loss.item()
        times.append(time.perf_counter() - start)
    common.report(args, times, value)



def infer(args):
    """The forward-only loop: the network in eval form under inference_mode, the outputs to numpy."""
    model = build(args.model, args.input_shape, args.classes, args.network).eval()
    batches = [torch.from_numpy(x) for x, _ in common.host_batches(args)]
    times = []
    with torch.inference_mode():
        for i in range(args.steps):
            start = time.perf_counter()
            out = model(batches[i % len(batches)]).numpy()
            times.append(time.perf_counter() - start)
    common.report(args, times, out.mean())


if __name__ == "__main__":
    main()
