export const VERSION = "0.1.0";
/** Sent by the client and checked by the edge once the sync protocol is versioned. */
export const API_VERSION = "2026-11-21";
