"""The marks of one pipeline call a watch measures, set by hooks on the user's own modules as its phases pass,
and the phases they make (the same Phases as an engine run's)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .run import RunMeta
from .stopwatch import Stopwatch
from .totals import Phases


@dataclass
class CallMarks:
    """Host times (t_*) are seconds on the watch's clock; marks are the stopwatch's (device events on CUDA,
    host times otherwise); None: not reached."""
    t0: float | None = None          # the call's start: its text encoding, else its first UNet forward
    te0: Any = None                  # text encoding
    te1: Any = None
    denoise0: Any = None             # where step 1 begins
    finished: bool = False           # the last step's callback has run
    t_denoised: float | None = None
    denoised: Any = None
    decode0: Any = None              # the pipeline's own final decode, after the last step
    decode1: Any = None
    t_decoded: float | None = None   # host time at decode1: the device may still be decoding
    final_encode_ms: float = 0.0     # save(): PNG encode and write
    write_ms: float = 0.0
    t_end: float | None = None
    meta: RunMeta | None = None      # set at the first step

    def phases(self, sw: Stopwatch) -> Phases:
        """The call's phases, once it has ended: from its start to save()'s end, else to where the device
        finished its last work, else to now."""
        end = self.t_end or self._device_end(sw) or sw.clock()
        return Phases(wall_ms=(end - (end if self.t0 is None else self.t0)) * 1e3,
                      text_encode_ms=sw.ms(self.te0, self.te1), final_decode_ms=sw.ms(self.decode0, self.decode1),
                      final_encode_ms=self.final_encode_ms, write_ms=self.write_ms)

    def _device_end(self, sw: Stopwatch) -> float | None:
        """Without save(), the call ends where the device finished its last work: the final decode's end
        (or the last step's, for output_type="latent"), mapped onto the host clock. A host timestamp taken
        when the work was queued would end the call before the device did."""
        for mark, host in ((self.decode1, self.t_decoded), (self.denoised, self.t_denoised)):
            if host is not None:
                sw.wait(mark)  # after the call, so free; anchors the clocks if none met yet
                device = sw.host_time(mark)
                return max(host, device) if device is not None else host
        return None
