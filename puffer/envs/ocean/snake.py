"""Snake: many snakes in each arena, every snake a row, all arenas stepped at once with numpy.

A small multi-agent game: `num_snakes` snakes share each of `num_arenas` square arenas with
`num_food` pieces of food. A snake turns left, goes straight or turns right (Discrete(3)); eating
grows it by one cell and pays 1, a replacement food appears on a random empty cell. Running into
a wall, any snake's body or another snake's head costs 1 and ends that snake's episode: its body
is cleared and it starts again, length 1, on a random empty cell the next step. An episode is
truncated after `max_steps` steps.

Each snake sees the (2 * view + 1)^2 cells around its head, turned so that its heading is up:
0 empty, 1 food, 2 its own body, 3 another snake, 4 wall; an int8 grid, which the default
policy reads with a symbol embedding (puffer.policies.networks.SymbolGridEncoder).

A body is kept as each cell's remaining lifetime (the snake's length when the head enters it,
minus one each step the snake does not eat), so moving never walks a list of cells.

Scores: the return is food eaten minus 1 for a death. Random play returns about -0.8 (it dies
within a few steps, usually into a wall); the shipped config eats several pieces per life.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from puffer.emulation import Buffers
from puffer.envs.ocean.base import BatchedEnv

EMPTY, FOOD, OWN, OTHER, WALL = range(5)
MOVES = np.array([(-1, 0), (0, 1), (1, 0), (0, -1)])  # up, right, down, left: heading 0..3
COLOURS = np.array([(0, 0, 0), (230, 60, 60), (60, 200, 90), (80, 140, 240), (240, 200, 60),
                    (200, 90, 220), (60, 210, 210), (250, 150, 60), (160, 160, 160)], np.uint8)


class Snake(BatchedEnv):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 15}

    def __init__(self, num_arenas: int = 256, num_snakes: int = 4, size: int = 16, num_food: int = 8,
                 view: int = 4, max_steps: int = 1000, seed: int = 0, render_mode: str | None = "rgb_array",
                 buf: Buffers | None = None):
        if num_snakes + num_food >= size * size // 2:
            raise ValueError(f"ocean/snake: {num_snakes} snakes and {num_food} food in a {size}x{size} "
                             "arena; expected them to fill under half of it")
        self.name = "ocean/snake"
        self.arenas, self.snakes, self.size, self.num_food = num_arenas, num_snakes, size, num_food
        self.view, self.max_steps, self.render_mode = view, max_steps, render_mode
        side = 2 * view + 1
        self.single_observation_space = spaces.Box(0, WALL, (side, side), np.int8)
        self.single_action_space = spaces.Discrete(3)
        rows = num_arenas * num_snakes
        self.arena_of = np.repeat(np.arange(num_arenas), num_snakes)
        self.ttl = np.zeros((num_arenas, size, size), np.int64)  # a body cell's remaining steps
        self.owner = np.zeros((num_arenas, size, size), np.int64)  # the row whose body it is
        self.food = np.zeros((num_arenas, size, size), bool)
        self.head = np.zeros((rows, 2), np.int64)
        self.heading = np.zeros(rows, np.int64)
        self.length = np.zeros(rows, np.int64)
        offsets = np.arange(-view, view + 1)  # a view's cells, as offsets in a padded arena
        self.code_dtype = np.int16 if rows < 30_000 else np.int32  # int16 gathers faster
        self.window = (offsets[:, None] * (size + 2 * view) + offsets[None, :]).ravel()
        self.init_rows(rows, seed)
        self.set_buffers(buf)

    def reset(self, seed: int | None = None):
        self.ttl[:] = 0
        self.food[:] = False
        return super().reset(seed)

    # -- the rules ---------------------------------------------------------------------------
    def _empty_cells(self, arenas: np.ndarray) -> np.ndarray:
        """One random empty cell (no body, no food) in each of these arenas, as (row, col)."""
        cells = np.zeros((len(arenas), 2), np.int64)
        todo = np.arange(len(arenas))
        for _ in range(1000):  # the arena is under half full: each draw succeeds with p > 1/2
            drawn = self.rng.integers(0, self.size, (len(todo), 2))
            a = arenas[todo]
            free = (self.ttl[a, drawn[:, 0], drawn[:, 1]] == 0) & ~self.food[a, drawn[:, 0], drawn[:, 1]]
            cells[todo[free]] = drawn[free]
            todo = todo[~free]
            if not len(todo):
                return cells
        raise RuntimeError("ocean/snake: found no empty cell in 1000 draws")

    def start(self, rows: np.ndarray) -> None:
        if not self.food.any():  # reset(): the food first
            for _ in range(self.num_food):
                self._add_food(np.arange(self.arenas))
        for part in _by_arena(rows, self.arena_of):  # one snake per arena at a time: two new
            arenas = self.arena_of[part]  # snakes never draw the same cell
            cells = self._empty_cells(arenas)
            self.head[part] = cells
            self.ttl[arenas, cells[:, 0], cells[:, 1]] = 1
            self.owner[arenas, cells[:, 0], cells[:, 1]] = part
        self.heading[rows] = self.rng.integers(0, 4, len(rows))
        self.length[rows] = 1

    def _add_food(self, arenas: np.ndarray) -> None:
        """A food on a random empty cell of each arena listed (twice for an arena listed twice)."""
        for part in _by_arena(np.arange(len(arenas)), arenas):
            cells = self._empty_cells(arenas[part])
            self.food[arenas[part], cells[:, 0], cells[:, 1]] = True

    def advance(self, actions: np.ndarray):
        moving = ~self.needs_reset  # the snakes that died last step wait to be placed again
        self.heading = np.where(moving, (self.heading + actions.reshape(-1) - 1) % 4, self.heading)
        target = self.head + MOVES[self.heading]
        arena = self.arena_of
        inside = ((target >= 0) & (target < self.size)).all(axis=1)
        r, c = np.clip(target[:, 0], 0, self.size - 1), np.clip(target[:, 1], 0, self.size - 1)
        eats = moving & inside & self.food[arena, r, c]
        # Tails move first (a snake may follow its own or another's tail), unless it grows.
        self.ttl -= (self.ttl > 0) & ~eats[self.owner]
        # Heads meeting on one cell all die.
        cell = (arena * self.size + r) * self.size + c
        crowded = np.bincount(cell[moving & inside], minlength=self.arenas * self.size ** 2)[cell] > 1
        dies = moving & (~inside | (self.ttl[arena, r, c] > 0) | crowded)
        lives = moving & ~dies
        self.length += eats & lives
        if dies.any():  # clear the dead snakes' bodies
            self.ttl[dies[self.owner]] = 0
        self.head = np.where(lives[:, None], np.stack([r, c], axis=1), self.head)
        self.ttl[arena[lives], r[lives], c[lives]] = self.length[lives]
        self.owner[arena[lives], r[lives], c[lives]] = np.flatnonzero(lives)
        eaten = eats & lives
        if eaten.any():
            self.food[arena[eaten], r[eaten], c[eaten]] = False
            self._add_food(arena[eaten])
        return eaten.astype(np.float64) - dies, dies

    # -- what a snake sees -------------------------------------------------------------------
    def _views(self) -> np.ndarray:
        """The cells around every snake's head, as symbols, not yet turned: one gather from
        the arenas coded as -1 wall (the padding), 0 empty, 1 food, 2 + row a body."""
        v, padded = self.view, self.size + 2 * self.view
        code = np.full((self.arenas, padded, padded), -1, self.code_dtype)
        code[:, v:-v, v:-v] = np.where(self.ttl > 0, self.owner + 2, self.food)
        centre = (self.arena_of * padded + self.head[:, 0] + v) * padded + self.head[:, 1] + v
        seen = code.ravel()[centre[:, None] + self.window].reshape(self.num_agents, 2 * v + 1, 2 * v + 1)
        own = seen == (np.arange(self.num_agents, dtype=self.code_dtype) + 2)[:, None, None]
        symbols = np.where(seen >= 2, np.where(own, OWN, OTHER), np.where(seen < 0, WALL, seen))
        return symbols.astype(np.int8)

    def observe(self) -> None:
        views = self._views()
        for heading in range(1, 4):  # turn each view so that the snake's heading is up
            rows = self.heading == heading
            if rows.any():
                views[rows] = np.rot90(views[rows], k=heading, axes=(1, 2))
        self.observations[:] = views

    def render(self) -> np.ndarray:
        """The first arena as an RGB frame, 16 pixels a cell: food red, each snake its colour."""
        index = np.where(self.food[0], 1, 0)
        body = self.ttl[0] > 0
        index = np.where(body, 2 + self.owner[0] % (len(COLOURS) - 2), index)
        return np.kron(COLOURS[index], np.ones((16, 16, 1), np.uint8))


def _by_arena(rows: np.ndarray, arena_of: np.ndarray) -> list[np.ndarray]:
    """`rows` split into parts in which no two rows share an arena (`arena_of[row]`)."""
    arenas = arena_of[rows]
    order = np.argsort(arenas, kind="stable")
    rank = np.empty(len(rows), np.int64)  # how many earlier rows share the arena
    sorted_arenas = arenas[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_arenas)) + 1]
    counts = np.diff(np.r_[starts, len(rows)])
    rank[order] = np.arange(len(rows)) - np.repeat(starts, counts)
    return [rows[rank == k] for k in range(int(rank.max()) + 1)] if len(rows) else []
