import numpy as np

def sample_rows(dist: np.ndarray, u: np.ndarray, out: np.ndarray, /) -> None: ...
def first_passing(
    p: np.ndarray,
    q: np.ndarray,
    batch_row: np.ndarray,
    pos: np.ndarray,
    joint: np.ndarray,
    u: np.ndarray,
    row: np.ndarray,
    hit: np.ndarray,
    /,
) -> None: ...
