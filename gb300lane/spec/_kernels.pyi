import numpy as np

def sample_rows(dist: np.ndarray, u: np.ndarray, out: np.ndarray, /) -> None: ...
def accept(
    block: bool,
    p: np.ndarray,
    q: np.ndarray,
    drafts: np.ndarray,
    rows: np.ndarray,
    u: np.ndarray,
    tau: np.ndarray,
    scale: np.ndarray,
    /,
) -> None: ...
def sample_correction(
    p: np.ndarray,
    q: np.ndarray,
    rows: np.ndarray,
    tau: np.ndarray,
    scale: np.ndarray,
    u: np.ndarray,
    out: np.ndarray,
    /,
) -> None: ...
def sample_support(
    rows: np.ndarray,
    scale: np.ndarray,
    cols: np.ndarray,
    qv: np.ndarray,
    has_q: np.ndarray,
    u: np.ndarray,
    out: np.ndarray,
    /,
) -> None: ...
def support_accept(
    p_sup: np.ndarray,
    q_sup: np.ndarray,
    choice: np.ndarray,
    u: np.ndarray,
    tau: np.ndarray,
    scale: np.ndarray,
    /,
) -> None: ...
def draft_slot(
    table: np.ndarray,
    remap: np.ndarray,
    over: np.ndarray,
    pair: np.ndarray,
    u: np.ndarray,
    argmax: np.ndarray,
    cand: np.ndarray,
    next: np.ndarray,
    probs: np.ndarray,
    choice: np.ndarray,
    token: np.ndarray,
    nxt: np.ndarray,
    /,
) -> None: ...
