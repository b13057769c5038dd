// The page's one state object. Every module reads and changes the page through it, and the view is drawn from it:
// no control's `disabled` stands for "a run is going", no global holds a run.
export const $ = (id) => document.getElementById(id);

export const state = {
  ws: null,             // the WebSocket (connection.js)
  starts: true,         // false: a script owns the runs (serve(watch)); the page starts none
  running: false,       // a run is going: its `run` came and its `done` not yet
  measuring: false,     // a measure series is going (server/measure.py)
  judging: false,       // the fidelity pass is going (untimed, between runs: server/server.py)
  errorField: null,     // the field the error banner names ("" for none): editing it to a valid value clears it
  init: null,           // img2img: the past run whose final image is the next start's input (null: text to image)
  run: null,            // the run this tab watches: { meta, rows (step -> row), started, frames, bytes, dropped, lastSeq }
  offered: null,        // the server's hello: the decoders it offers and whether it has TAESD weights
  cores: null,          // the cores the server's process may use (its hello): what a CPU's busy share is of
  maxPrompt: 2000,      // the server's limit on a prompt, characters (its hello's max_prompt)
  examples: [],         // prompts the model knows (the demo model's vocabulary), for the example button
  words: null,          // the words the model learnt (a Set; the demo model's), to name a prompt's others; null: any
  nextExample: 0,
  runs: new Map(),      // every run this tab knows, by id; ids sort by time
  picked: [],           // the runs ticked for the comparison (two at most)
  analysis: null,       // { run_id, data }: the server's analysis of the newest run's settings (figures, advice)
  view: {
    clip: null,         // the clip preview playing: its decoded frames, the frame shown and its timer
    lastSeq: -1,        // the newest preview received: a clip still decoding for an older one gives way
    drawnSeq: -1,       // the newest preview drawn: an older one whose decode finished later is never drawn over it
    shown: null,        // the preview on the canvas, for its caption: its header, KB and clip note
    finalShown: false,  // the view shows a final image in the previews' place (the flip button goes back)
    chartDirty: false,  // the rows changed since the chart was last drawn
  },
};
