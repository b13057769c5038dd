"""Where one measured call's phases passed, and the phases they make: the one record the measured call's
lifecycle keeps (lifecycle.py), whichever adapter feeds it (the engine's classic runs, its Modular runs, a user's
watched call). Marks are the stopwatch's (device events on CUDA, host times otherwise); host times (t_*) are seconds on
the call's clock; None: not reached, and its phase is 0."""
from __future__ import annotations

from dataclasses import dataclass

from previewlab.preview.record.totals import Phases
from previewlab.preview.timing.stopwatch import Mark, Stopwatch


@dataclass
class CallMarks:
    t0: float | None = None          # the call's start: its text encoding, else its first denoiser forward
    te0: Mark | None = None          # text encoding
    te1: Mark | None = None
    denoise0: Mark | None = None     # where step 1 begins
    t_denoised: float | None = None
    denoised: Mark | None = None     # the last step's work is queued
    drain0: Mark | None = None       # the wait for the previews in flight begins (a watch drains after the call)
    decode0: Mark | None = None      # the final decode: previews in flight have finished, the VAE is free
    decode1: Mark | None = None
    t_decoded: float | None = None   # host time at decode1: the device may still be decoding
    copy_ms: float = 0.0             # the final image's host copy after the device passed decode1 (the engine's)
    final_encode_ms: float = 0.0     # PNG encode and write (the engine's, or a watch's save())
    write_ms: float = 0.0
    t_end: float | None = None       # the request's end
    peak: int = 0                    # overlap: the most previews in flight at once

    def phases(self, sw: Stopwatch) -> Phases:
        """The call's phases, once it has ended: from its start to the request's end, else to where the device
        finished its last work, else to now."""
        end = self.t_end or self._device_end(sw) or sw.clock()
        return Phases(wall_ms=(end - (end if self.t0 is None else self.t0)) * 1e3,
                      text_encode_ms=sw.ms(self.te0, self.te1),
                      final_decode_ms=sw.ms(self.decode0, self.decode1) + self.copy_ms,
                      final_encode_ms=self.final_encode_ms, write_ms=self.write_ms,
                      drain_ms=sw.ms(self.drain0, self.decode0))

    def _device_end(self, sw: Stopwatch) -> float | None:
        """Without an end of the request (a watch without save()), the call ends where the device finished its
        last work: the final decode's end (or the last step's, for output_type="latent"), mapped onto the host
        clock. A host timestamp taken when the work was queued would end the call before the device did."""
        for mark, host in ((self.decode1, self.t_decoded), (self.denoised, self.t_denoised)):
            if host is not None:
                sw.wait(mark)  # after the call, so free; anchors the clocks if none met yet
                device = sw.host_time(mark)
                return max(host, device) if device is not None else host
        return None
