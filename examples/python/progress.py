"""The training loop's progress line, as examples/common.h prints it:
step=120 loss=0.41230 world=4 gen=3 rate=1843.2 step_s=0.0131 t=12.345 unix=1764480000.123456
"""
import time


class ProgressPrinter:
    def __init__(self, every):
        self.every = max(1, every)
        self.start = self.last = self.window_start = time.monotonic()
        self.samples = 0

    def step(self, step, loss, world, gen, samples):
        """Call after each committed step on rank 0."""
        now = time.monotonic()
        since_last = now - self.last
        self.samples += samples
        if step % self.every == 0:
            window = now - self.window_start
            rate = self.samples / window if window > 0 else 0.0
            print(f"step={step} loss={loss:.5f} world={world} gen={gen} rate={rate:.1f} step_s={since_last:.4f} "
                  f"t={now - self.start:.3f} unix={time.time():.6f}", flush=True)
            self.samples = 0
            self.window_start = now
        self.last = now
