-- take.lua: one replica's admission call, both classes, atomically.
--
-- KEYS (one {hash tag}, so Redis Cluster keeps them in one slot):
--   1 window    HASH  sec, i, b, ti, tb  what each class used of the current second,
--                                         in requests and in tokens
--   2 inflight  HASH  i, b               fleet totals in flight, by class
--                     <replica>:i, <replica>:b   each replica's own counts
--                     ci, cb; <replica>:ci, :cb  of those, slots granted ahead of demand
--                                                 (credits, prefetch.go): the fleet's, each replica's
--                     <replica>:d1, :d2           the last second it had waiters, by class
--                     <replica>:s, :g1, :g2       the second it last took in, and what it
--                     <replica>:t1, :t2           took of each class in it: requests, tokens
--   3 heartbeat ZSET  replica -> expiry (ms)     live replicas
--   4 starved   ZSET  replica -> last second in which an interactive request waited
--   5 upstream  HASH  at, hold, throttle (ms)   the freshest upstream observation
--                     and until when bulk is held on the upstream's word
--   6 output    HASH  level, at                  the output budget's bucket: level in
--                                                  1/60000 token, when it was brought up
--                                                  to date (ms)
-- ARGV (by name in ARG below; redisstore.go's arg* constants are the same
-- positions, and TestTakeScriptPositions holds them equal):
--   1 replica id
--   2,3 want interactive, bulk            waiting requests
--   4,5 held interactive, bulk            this replica's in flight now (absolute),
--                                         its credits included
--   6,7,8 account, bulk, reserve          requests per minute
--   9,10,11 in flight: bound, bulk share, reserve
--   12 borrow ("1" or "0")
--   13 replica TTL (ms): how long a silent replica keeps its slots
--   14 clock override (ms), "" in production: windows follow Redis TIME
--   15 in-flight poll (ms): retry hint when only the in-flight bound blocks
--   16 upstream report age (ms), "" when there is none; 17 its hold (ms after
--      the observation, 0 lifts an older hold); 18 429 hold (ms from now, 0 none)
--   19,20,21 tokens per minute: account (0: not enforced), bulk, reserve
--   22,23 token corrections interactive, bulk (real usage minus estimates)
--   24,25 output tokens per minute: budget (0: not enforced), reserve
--   26 output tokens reported since the last call
--   27,28 credits interactive, bulk       of held, the credits (absolute)
--   29 fair: which classes share their second between replicas with
--      waiters (fairness callers): 1 interactive, 2 bulk, 3 both, 0 none
--   30.. per class, interactive first: n, how many waiters are listed, and
--      one value per waiter in the order grants go to them: its token
--      estimate. n = 0 with tokens not enforced means the want counts the
--      waiters.
-- Reply (by name in REPLY below, mirrored by redisstore.go's reply*
-- constants): {granted_i, granted_b, blocker_i, blocker_b, retry_ms, sec,
--         fleet_i, fleet_b, hold_ms, used_i, used_b, tokens_i, tokens_b, left_ms,
--         credits_i, credits_b}
--   fleet: slots taken across the fleet, credits included; credits: of them,
--   the credits (so fleet - credits is requests genuinely in flight).
--   left_ms: what is left of the window's second, by Redis's clock.
--   blocker: 0 none, 1 window, 2 in flight, 3 upstream or output budget
--   (bulk held), 4 output budget spent (interactive held). hold_ms counts
--   the output budget's bulk hold too.
--
-- The script runs in phases, one function each, in this order: the clock,
-- reaping dead replicas, this replica's in-flight count, the window, the
-- upstream's word, the output budget, interactive's grant, bulk's grant,
-- saving, and the reply with its retry hint.

local ARG = {
  replica = 1, want_i = 2, want_b = 3, inflight_i = 4, inflight_b = 5,
  account_rpm = 6, bulk_rpm = 7, reserve_rpm = 8,
  inflight_bound = 9, bulk_inflight = 10, reserve_inflight = 11,
  borrow = 12, replica_ttl = 13, clock = 14, inflight_poll = 15,
  upstream_age = 16, upstream_hold = 17, upstream_throttle = 18,
  account_tpm = 19, bulk_tpm = 20, reserve_tpm = 21,
  correction_i = 22, correction_b = 23,
  output_tpm = 24, reserve_output_tpm = 25, output_spent = 26, credits_i = 27, credits_b = 28, fair = 29, lists = 30,
}
local REPLY = {
  granted_i = 1, granted_b = 2, blocker_i = 3, blocker_b = 4, retry_ms = 5, sec = 6,
  fleet_i = 7, fleet_b = 8, hold_ms = 9, used_i = 10, used_b = 11,
  tokens_i = 12, tokens_b = 13, left_ms = 14, credits_i = 15, credits_b = 16,
}
local function arg(name) return ARGV[ARG[name]] end
local function num(name) return tonumber(ARGV[ARG[name]]) end

local kwin, kinf, khb, kstarved, kup, kout = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local rid = arg('replica')
local want = {num('want_i'), num('want_b')}
local held = {num('inflight_i'), num('inflight_b')}
local accountRPM, bulkRPM, reserveRPM = num('account_rpm'), num('bulk_rpm'), num('reserve_rpm')
local limIF, bulkIF, reserveIF = num('inflight_bound'), num('bulk_inflight'), num('reserve_inflight')
local accountTPM, bulkTPM, reserveTPM = num('account_tpm'), num('bulk_tpm'), num('reserve_tpm')
local borrowOn = arg('borrow') == '1'
local ttl = num('replica_ttl')
local poll = num('inflight_poll')
local field = {'i', 'b'}

-- Each class's list of waiters (ARGV positions).
local lists = {}
local pos = ARG.lists
for c = 1, 2 do
  lists[c] = {first = pos + 1, n = tonumber(ARGV[pos])}
  pos = pos + 1 + lists[c].n
end

-- Phase: the clock. Windows follow Redis TIME unless a test sets it.
local function clock()
  if arg('clock') ~= '' then return num('clock') end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local nowMs = clock()
local sec = math.floor(nowMs / 1000)

-- Phase: replicas whose heartbeat expired stop counting.
local function reapDead()
  local dead = redis.call('ZRANGEBYSCORE', khb, '-inf', nowMs)
  for _, r in ipairs(dead) do
    if r ~= rid then
      for c = 1, 2 do
        local n = tonumber(redis.call('HGET', kinf, r .. ':' .. field[c]) or '0')
        if n ~= 0 then redis.call('HINCRBY', kinf, field[c], -n) end
        local cr = tonumber(redis.call('HGET', kinf, r .. ':c' .. field[c]) or '0')
        if cr ~= 0 then redis.call('HINCRBY', kinf, 'c' .. field[c], -cr) end
        redis.call('HDEL', kinf, r .. ':' .. field[c], r .. ':c' .. field[c], r .. ':d' .. c, r .. ':g' .. c, r .. ':t' .. c)
      end
      redis.call('HDEL', kinf, r .. ':s')
      redis.call('ZREM', khb, r)
      redis.call('ZREM', kstarved, r)
    end
  end
end

-- Phase: this replica's count is what it says it holds, so drift heals on
-- every call. Returns the fleet's totals, by class.
local credits = {num('credits_i'), num('credits_b')}
local function assertInFlight()
  local total, cred = {}, {}
  for c = 1, 2 do
    local old = tonumber(redis.call('HGET', kinf, rid .. ':' .. field[c]) or '0')
    total[c] = math.max(0, tonumber(redis.call('HGET', kinf, field[c]) or '0') - old + held[c])
    local oldc = tonumber(redis.call('HGET', kinf, rid .. ':c' .. field[c]) or '0')
    cred[c] = math.max(0, tonumber(redis.call('HGET', kinf, 'c' .. field[c]) or '0') - oldc + credits[c])
  end
  return total, cred
end

-- allowanceAt is allowance.lua's, prepended to this script.
local function allowance(rpm) return allowanceAt(sec, rpm) end

-- Phase: the current second's use, in requests and tokens; a new second
-- starts with the last one's token overshoot.
local function readWindow()
  local w = redis.call('HMGET', kwin, 'sec', 'i', 'b', 'ti', 'tb')
  local used, tok = {0, 0}, {0, 0}
  if tonumber(w[1]) == sec then
    used = {tonumber(w[2]) or 0, tonumber(w[3]) or 0}
    tok = {tonumber(w[4]) or 0, tonumber(w[5]) or 0}
  elseif tonumber(w[1]) == sec - 1 then
    -- The last second's token overshoot is carried as use, bulk's first,
    -- up to a minute's allowance (grant.go's window.next).
    local ti, tb = tonumber(w[4]) or 0, tonumber(w[5]) or 0
    local excess = math.min(ti + tb - allowanceAt(sec - 1, accountTPM), accountTPM)
    if excess > 0 then
      local cb = math.min(math.max(tb, 0), excess)
      tok = {excess - cb, cb}
    end
  end
  return used, tok
end

-- Phase: the upstream's word, merged as upstream.go's upstreamState.merge
-- does: a clearly fresher observation (more than SIMULTANEOUS_MS later)
-- decides the reserve hold, one made at the same moment can only make it
-- end later, an older one changes nothing; a 429's hold only ever grows.
-- Returns how long bulk is held from now (ms).
local SIMULTANEOUS_MS = 1000
local function mergeUpstream()
  local up = redis.call('HMGET', kup, 'at', 'hold', 'throttle')
  local upAt, upHold, upThrottle = tonumber(up[1]) or 0, tonumber(up[2]) or 0, tonumber(up[3]) or 0
  if arg('upstream_age') ~= '' then
    local at = nowMs - num('upstream_age')
    local hold = 0
    if num('upstream_hold') > 0 then hold = at + num('upstream_hold') end
    if at > upAt + SIMULTANEOUS_MS then
      upAt, upHold = at, hold
    elseif at >= upAt - SIMULTANEOUS_MS then
      if at > upAt then upAt = at end
      if hold > upHold then upHold = hold end
    end
    local th = num('upstream_throttle')
    if th > 0 and nowMs + th > upThrottle then upThrottle = nowMs + th end
    redis.call('HSET', kup, 'at', upAt, 'hold', upHold, 'throttle', upThrottle)
    redis.call('PEXPIRE', kup, math.max(60000, math.max(upHold, upThrottle) - nowMs + 60000))
  end
  return math.max(0, math.max(upHold, upThrottle) - nowMs)
end

-- Phase: the output budget, as output.go's outputBucket.take: refilled at
-- tpm units a millisecond (a unit is 1/60000 token) up to a minute's
-- worth, debited the output reported, down to a minute's debt. Returns
-- how long (ms) bulk is held (below the reserve) and interactive is held
-- (nothing left).
local OUTPUT_UNIT = 60000
local function ceilDiv(a, b) return math.floor((a + b - 1) / b) end
local function takeOutput()
  local tpm = num('output_tpm')
  if tpm <= 0 then
    redis.call('DEL', kout)
    return 0, 0
  end
  local full = tpm * OUTPUT_UNIT
  local o = redis.call('HMGET', kout, 'level', 'at')
  local level, at = tonumber(o[1]) or 0, tonumber(o[2]) or 0
  if at == 0 then
    level = full
  elseif nowMs > at then
    level = math.min(full, level + math.min(nowMs - at, OUTPUT_UNIT) * tpm)
  end
  at = math.max(at, nowMs)
  -- Past two minutes' worth, spent changes nothing (the level is at most
  -- full, its debt bounded at a minute): output.go bounds it so, to keep
  -- its product in an int64.
  level = math.max(level - math.min(num('output_spent'), 2 * tpm) * OUTPUT_UNIT, -full)
  redis.call('HSET', kout, 'level', string.format('%.0f', level), 'at', string.format('%.0f', at))
  redis.call('PEXPIRE', kout, 120000)
  local bulkMs, interactiveMs = 0, 0
  local reserve = num('reserve_output_tpm') * OUTPUT_UNIT
  if level < reserve then bulkMs = ceilDiv(reserve - level, tpm) end
  if level <= 0 then interactiveMs = ceilDiv(1 - level, tpm) end
  return bulkMs, interactiveMs
end

reapDead()
local total, fleetCredits = assertInFlight()
local used, tok = readWindow()
local holdMs = mergeUpstream()
local outBulkMs, outInteractiveMs = takeOutput()
holdMs = math.max(holdMs, outBulkMs)

-- Grants class c's listed waiters in order while the class has room:
-- wroom requests in the window, froom in flight and, when tokens are
-- enforced, troom tokens (strict: bulk takes only what fits, but for its
-- first request of a second). With no list and tokens not enforced, want
-- requests go as the rooms allow. Same as grant.go's grantInOrder.
local function grantInOrder(c, want, wroom, froom, troom, strict)
  local n = 0
  local function stop()
    if wroom <= n then return n, 1 end
    return n, 2
  end
  local list = lists[c]
  if list.n == 0 and accountTPM <= 0 then
    n = math.max(0, math.min(want, wroom, froom))
    if n == want then return n, 0 end
    return stop()
  end
  local first = tok[c] <= 0
  for i = list.first, list.first + list.n - 1 do
    local cost = tonumber(ARGV[i])
    if n >= math.min(wroom, froom) then return stop() end
    if accountTPM > 0 then
      if troom <= 0 or (strict and cost > troom and not (first and n == 0)) then return n, 1 end
      troom = troom - cost
      tok[c] = tok[c] + cost
    end
    n = n + 1
  end
  return n, 0
end

-- Phase: replicas with waiters share a fair class's second, counted in
-- what the pool limits: requests, and tokens too while tokens are
-- enforced (as each replica's own queue counts service, fair.go). In its
-- first SPLIT_MS, a replica takes at most its part of what the class may
-- take in the second (an equal part among the live replicas that had
-- waiters of the class this second or the last); after it, anyone takes
-- what is left, so nothing goes unused. Without it, the replica that
-- calls first at a second's start takes the whole second, and a caller
-- whose request waits on another replica waits for seconds however each
-- replica orders its own queue; with it, each replica's next grant comes
-- within the second and goes to its most deserving waiter. splitRoom
-- returns the rooms it leaves class c — of room requests and troom
-- tokens, whose use in the second is used and tused — and whether the
-- split binds each.
local splitHeld = {false, false}
local SPLIT_MS = 500
local fairMask = num('fair')
local fairOn = {fairMask % 2 == 1, math.floor(fairMask / 2) % 2 == 1}
local tookSec = tonumber(redis.call('HGET', kinf, rid .. ':s') or '0')
local took, tookTok = {0, 0}, {0, 0}
if tookSec == sec then
  local t = redis.call('HMGET', kinf, rid .. ':g1', rid .. ':g2', rid .. ':t1', rid .. ':t2')
  took = {tonumber(t[1]) or 0, tonumber(t[2]) or 0}
  tookTok = {tonumber(t[3]) or 0, tonumber(t[4]) or 0}
end
local function splitRoom(c, used, room, tused, troom)
  if not fairOn[c] or want[c] <= 0 or nowMs % 1000 >= SPLIT_MS then return room, troom, false, false end
  local n = 1
  for _, r in ipairs(redis.call('ZRANGE', khb, 0, -1)) do
    if r ~= rid and tonumber(redis.call('HGET', kinf, r .. ':d' .. c) or '0') >= sec - 1 then n = n + 1 end
  end
  if n == 1 then return room, troom, false, false end
  local part = math.max(0, math.ceil((used + room) / n) - took[c])
  local split = part < room
  if split then room = part end
  local tsplit = false
  if accountTPM > 0 then
    local tpart = math.max(0, math.ceil((tused + troom) / n) - tookTok[c])
    tsplit = tpart < troom
    if tsplit then troom = tpart end
  end
  return room, troom, split, tsplit
end
-- grantSplit is grantInOrder within what splitRoom leaves class c, and
-- records what the class took in tokens and whether the split alone held
-- it: its part of the requests all taken, or its part of the tokens
-- stopping it with requests to spare.
local function grantSplit(c, wroom, froom, troom, strict)
  local tused, split, tsplit = tok[c], false, false
  wroom, troom, split, tsplit = splitRoom(c, used[c], wroom, tused, troom)
  local n, b = grantInOrder(c, want[c], wroom, froom, troom, strict)
  tookTok[c] = tookTok[c] + tok[c] - tused
  splitHeld[c] = (split and n >= wroom) or (tsplit and b == 1 and n < wroom)
  return n, b
end

local granted, blocker = {0, 0}, {0, 0}
local A = allowance(accountRPM)
local TA = allowance(accountTPM)
-- A charge settled down is room in this window, even below zero, down to
-- one second's allowance; settled up, use is bounded by the second's and
-- a minute's allowance (grant.go's settleTokens).
tok[1] = math.min(math.max(-TA, tok[1] + num('correction_i')), TA + accountTPM)
tok[2] = math.min(math.max(-TA, tok[2] + num('correction_b')), TA + accountTPM)

-- Phase: interactive takes any free capacity of the second; a shortfall
-- marks this replica starved, which stops bulk borrowing fleet-wide.
local function grantInteractive()
  if outInteractiveMs > 0 then
    if want[1] > 0 then blocker[1] = 4 end
  else
    granted[1], blocker[1] = grantSplit(1, A - used[1] - used[2], limIF - total[1] - total[2], TA - tok[1] - tok[2], false)
  end
  used[1] = used[1] + granted[1]
  total[1] = total[1] + granted[1]
  -- A waiter left for other replicas' part of the second does not stop
  -- borrowing: the class had room.
  if granted[1] < want[1] and not splitHeld[1] then
    redis.call('ZADD', kstarved, sec + 1, rid)
  elseif want[1] > 0 then
    redis.call('ZREM', kstarved, rid)
  end
  redis.call('ZREMRANGEBYSCORE', kstarved, '-inf', sec - 1)
end

-- Phase: bulk takes its share, and borrows (never the reserve) while no
-- interactive request waits anywhere; nothing while the upstream holds it.
local function grantBulk()
  if holdMs > 0 then
    if want[2] > 0 then blocker[2] = 3 end
    return
  end
  local usedAll, inAll, tokAll = used[1] + used[2], total[1] + total[2], tok[1] + tok[2]
  local wroom, froom = allowance(bulkRPM) - used[2], bulkIF - total[2]
  local troom = allowance(bulkTPM) - tok[2]
  if borrowOn and redis.call('ZCOUNT', kstarved, sec, '+inf') == 0 then
    wroom = math.max(wroom, A - allowance(reserveRPM) - usedAll)
    froom = math.max(froom, limIF - reserveIF - inAll)
    troom = math.max(troom, TA - allowance(reserveTPM) - tokAll)
  end
  granted[2], blocker[2] = grantSplit(2, math.min(wroom, A - usedAll), math.min(froom, limIF - inAll),
    math.min(troom, TA - tokAll), true)
  used[2] = used[2] + granted[2]
  total[2] = total[2] + granted[2]
end

-- Phase: the window, the in-flight counts and this replica's heartbeat.
local function save()
  redis.call('HSET', kwin, 'sec', sec, 'i', used[1], 'b', used[2], 'ti', tok[1], 'tb', tok[2])
  redis.call('PEXPIRE', kwin, 5000)
  redis.call('HSET', kinf, 'i', total[1], 'b', total[2],
    rid .. ':i', held[1] + granted[1], rid .. ':b', held[2] + granted[2],
    rid .. ':s', sec, rid .. ':g1', took[1] + granted[1], rid .. ':g2', took[2] + granted[2],
    rid .. ':t1', tookTok[1], rid .. ':t2', tookTok[2],
    'ci', fleetCredits[1], 'cb', fleetCredits[2], rid .. ':ci', credits[1], rid .. ':cb', credits[2])
  for c = 1, 2 do
    if want[c] > 0 then redis.call('HSET', kinf, rid .. ':d' .. c, sec) end
  end
  redis.call('ZADD', khb, nowMs + ttl, rid)
  local keep = math.max(60000, ttl * 10)
  redis.call('PEXPIRE', kinf, keep)
  redis.call('PEXPIRE', khb, keep)
  redis.call('PEXPIRE', kstarved, keep)
end

-- Phase: when asking again can succeed for a blocked class.
local function retryHint()
  local retry = 0
  for c = 1, 2 do
    if blocker[c] ~= 0 then
      local r = 1000 - nowMs % 1000
      if blocker[c] == 2 and poll > 0 and poll < r then r = poll end
      if blocker[c] == 3 then r = math.max(1, holdMs) end
      if blocker[c] == 4 then r = math.max(1, outInteractiveMs) end
      if splitHeld[c] then r = math.max(1, SPLIT_MS - nowMs % 1000) end
      if retry == 0 or r < retry then retry = r end
    end
  end
  return retry
end

grantInteractive()
grantBulk()
save()

local reply = {}
reply[REPLY.granted_i], reply[REPLY.granted_b] = granted[1], granted[2]
reply[REPLY.blocker_i], reply[REPLY.blocker_b] = blocker[1], blocker[2]
reply[REPLY.retry_ms], reply[REPLY.sec] = retryHint(), sec
reply[REPLY.fleet_i], reply[REPLY.fleet_b] = total[1], total[2]
reply[REPLY.hold_ms] = holdMs
reply[REPLY.used_i], reply[REPLY.used_b] = used[1], used[2]
reply[REPLY.tokens_i], reply[REPLY.tokens_b] = math.max(0, tok[1]), math.max(0, tok[2]) -- credit is room, not use
reply[REPLY.left_ms] = 1000 - nowMs % 1000
reply[REPLY.credits_i], reply[REPLY.credits_b] = math.min(fleetCredits[1], total[1]), math.min(fleetCredits[2], total[2])
return reply
