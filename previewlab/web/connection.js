// The one WebSocket (/ws): text frames are JSON with a "type", binary frames are previews (canvas.js reads them).
// A lost connection is tried again after 1 s, then 2, 4 ... up to 15 s, from 1 s again once one opens.
import { $, state } from "./state.js";

const FIRST_WAIT_MS = 1000;
const MOST_WAIT_MS = 15000;
let wait = FIRST_WAIT_MS;

export function send(msg) {
  if (state.ws && state.ws.readyState === WebSocket.OPEN) state.ws.send(JSON.stringify(msg));
}

// handlers: { text(msg), frame(buffer) }
export function connect(handlers) {
  const ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws${location.search}`);
  state.ws = ws;
  ws.binaryType = "arraybuffer";
  const conn = $("conn");
  ws.onopen = () => {
    wait = FIRST_WAIT_MS;
    conn.textContent = "connected";
    conn.className = "pill ok";
    delete conn.dataset.closed;
  };
  ws.onclose = (ev) => {
    // the server's own close is the news (1001 server shutting down); the reconnects refused while it is down
    // each read 1006, which says nothing new: the first code stays until a connection opens again
    const first = conn.dataset.closed;
    const said = first && ev.code === 1006 ? first : `${ev.code}${ev.reason ? " " + ev.reason : ""}`;
    conn.dataset.closed = said;
    conn.textContent = `disconnected (${said})`;
    conn.className = "pill";
    conn.dataset.retryMs = String(wait);
    setTimeout(() => connect(handlers), wait);
    wait = Math.min(MOST_WAIT_MS, wait * 2);
  };
  ws.onmessage = (ev) => {
    if (typeof ev.data === "string") handlers.text(JSON.parse(ev.data));
    else handlers.frame(ev.data);
  };
}
