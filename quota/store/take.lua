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
-- ARGV[1]: one JSON object, takewire.go's takeArgs: the names are its
-- json tags (those under limits are Limits's, limits.go) and the meaning
-- of each is its doc comment. Per-class pairs are arrays, interactive
-- first (args.want[1], args.want[2]).
-- Reply: one JSON object, takewire.go's takeReply, every integer a decimal
-- string (luaInt: cjson would write 10^14 as 1e+14).
--
-- The script runs in phases, one function each, in this order: the clock,
-- reaping dead replicas, this replica's in-flight count, the window, the
-- upstream's word, the output budget, interactive's grant, bulk's grant,
-- saving, and the reply with its retry hint.

-- What stopped a class: store.go's blocker constants, by name
-- (TestTakeScriptBlockers holds the two equal).
local BLOCKER = {none = 0, window = 1, in_flight = 2, upstream = 3, output = 4}

local args = cjson.decode(ARGV[1])
local lim = args.limits
local kwin, kinf, khb, kstarved, kup, kout = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local rid = args.replica
local want, held, credits = args.want, args.in_flight, args.credits
local accountRPM, bulkRPM, reserveRPM = lim.account_rpm, lim.bulk_rpm, lim.reserve_rpm
local limIF, bulkIF, reserveIF = lim.max_in_flight, lim.bulk_in_flight, lim.reserve_in_flight
local accountTPM, bulkTPM, reserveTPM = lim.account_tpm, lim.bulk_tpm, lim.reserve_tpm
local field = {'i', 'b'}

-- Phase: the clock. Windows follow Redis TIME unless a test sets it.
local function clock()
  if args.clock_ms ~= 0 then return args.clock_ms end
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
  local u = args.upstream
  if u then
    local at = nowMs - u.age_ms
    local hold = 0
    if u.hold_ms > 0 then hold = at + u.hold_ms end
    if at > upAt + SIMULTANEOUS_MS then
      upAt, upHold = at, hold
    elseif at >= upAt - SIMULTANEOUS_MS then
      if at > upAt then upAt = at end
      if hold > upHold then upHold = hold end
    end
    local th = u.throttle_ms
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
  local tpm = lim.output_tpm
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
  level = math.max(level - math.min(args.output_spent, 2 * tpm) * OUTPUT_UNIT, -full)
  redis.call('HSET', kout, 'level', string.format('%.0f', level), 'at', string.format('%.0f', at))
  redis.call('PEXPIRE', kout, 120000)
  local bulkMs, interactiveMs = 0, 0
  local reserve = lim.reserve_output_tpm * OUTPUT_UNIT
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
    if wroom <= n then return n, BLOCKER.window end
    return n, BLOCKER.in_flight
  end
  local list = args.waiters[c]
  if #list == 0 and accountTPM <= 0 then
    n = math.max(0, math.min(want, wroom, froom))
    if n == want then return n, BLOCKER.none end
    return stop()
  end
  local first = tok[c] <= 0
  for _, cost in ipairs(list) do
    if n >= math.min(wroom, froom) then return stop() end
    if accountTPM > 0 then
      if troom <= 0 or (strict and cost > troom and not (first and n == 0)) then return n, BLOCKER.window end
      troom = troom - cost
      tok[c] = tok[c] + cost
    end
    n = n + 1
  end
  return n, BLOCKER.none
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
-- within the second and goes to its most deserving waiter.
local splitHeld = {false, false}
local SPLIT_MS = 500
local tookSec = tonumber(redis.call('HGET', kinf, rid .. ':s') or '0')
local took, tookTok = {0, 0}, {0, 0}
if tookSec == sec then
  local t = redis.call('HMGET', kinf, rid .. ':g1', rid .. ':g2', rid .. ':t1', rid .. ':t2')
  took = {tonumber(t[1]) or 0, tonumber(t[2]) or 0}
  tookTok = {tonumber(t[3]) or 0, tonumber(t[4]) or 0}
end

-- sharers counts the live replicas that had waiters of class c this
-- second or the last, this one included.
local function sharers(c)
  local n = 1
  for _, r in ipairs(redis.call('ZRANGE', khb, 0, -1)) do
    if r ~= rid and tonumber(redis.call('HGET', kinf, r .. ':d' .. c) or '0') >= sec - 1 then n = n + 1 end
  end
  return n
end

-- grantSplit is grantInOrder for class c within its part of the second
-- while the split holds (the rooms cut to it: of wroom requests and troom
-- tokens), recording what the class took in tokens and whether the split
-- alone held it: its part of the requests all taken, or its part of the
-- tokens stopping it with requests to spare. It has no Go twin:
-- memstore serves one replica, whose second is never split, so grant.go
-- grants within the rooms as they come; TestRedisFairSplit and
-- TestRedisFairSplitCountsTokens hold this through real Redis.
local function grantSplit(c, wroom, froom, troom, strict)
  local split, tsplit = false, false
  if lim.fair[c] and want[c] > 0 and nowMs % 1000 < SPLIT_MS then
    local n = sharers(c)
    if n > 1 then
      local part = math.max(0, math.ceil((used[c] + wroom) / n) - took[c])
      split = part < wroom
      if split then wroom = part end
      if accountTPM > 0 then
        local tpart = math.max(0, math.ceil((tok[c] + troom) / n) - tookTok[c])
        tsplit = tpart < troom
        if tsplit then troom = tpart end
      end
    end
  end
  local tused = tok[c]
  local n, b = grantInOrder(c, want[c], wroom, froom, troom, strict)
  tookTok[c] = tookTok[c] + tok[c] - tused
  splitHeld[c] = (split and n >= wroom) or (tsplit and b == BLOCKER.window and n < wroom)
  return n, b
end

local granted, blocker = {0, 0}, {BLOCKER.none, BLOCKER.none}
local A = allowance(accountRPM)
local TA = allowance(accountTPM)
-- A charge settled down is room in this window, even below zero, down to
-- one second's allowance; settled up, use is bounded by the second's and
-- a minute's allowance (grant.go's settleTokens).
for c = 1, 2 do
  tok[c] = math.min(math.max(-TA, tok[c] + args.corrections[c]), TA + accountTPM)
end

-- Phase: interactive takes any free capacity of the second; a shortfall
-- marks this replica starved, which stops bulk borrowing fleet-wide.
local function grantInteractive()
  if outInteractiveMs > 0 then
    if want[1] > 0 then blocker[1] = BLOCKER.output end
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
    if want[2] > 0 then blocker[2] = BLOCKER.upstream end
    return
  end
  local usedAll, inAll, tokAll = used[1] + used[2], total[1] + total[2], tok[1] + tok[2]
  local wroom, froom = allowance(bulkRPM) - used[2], bulkIF - total[2]
  local troom = allowance(bulkTPM) - tok[2]
  if lim.borrow and redis.call('ZCOUNT', kstarved, sec, '+inf') == 0 then
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
  redis.call('ZADD', khb, nowMs + args.ttl_ms, rid)
  local keep = math.max(60000, args.ttl_ms * 10)
  redis.call('PEXPIRE', kinf, keep)
  redis.call('PEXPIRE', khb, keep)
  redis.call('PEXPIRE', kstarved, keep)
end

-- Phase: when asking again can succeed for a blocked class.
local function retryHint()
  local retry = 0
  for c = 1, 2 do
    if blocker[c] ~= BLOCKER.none then
      local r = 1000 - nowMs % 1000
      if blocker[c] == BLOCKER.in_flight and args.poll_ms > 0 and args.poll_ms < r then r = args.poll_ms end
      if blocker[c] == BLOCKER.upstream then r = math.max(1, holdMs) end
      if blocker[c] == BLOCKER.output then r = math.max(1, outInteractiveMs) end
      if splitHeld[c] then r = math.max(1, SPLIT_MS - nowMs % 1000) end
      if retry == 0 or r < retry then retry = r end
    end
  end
  return retry
end

grantInteractive()
grantBulk()
save()

-- The reply's integers go as decimal strings (takewire.go's luaInt); %d
-- drops a fraction as Redis's own integer replies do.
local function int(x) return string.format('%d', x) end
local function pair(t) return {int(t[1]), int(t[2])} end
return cjson.encode({
  granted = pair(granted), blocker = pair(blocker),
  fleet = pair(total),
  credits = pair({math.min(fleetCredits[1], total[1]), math.min(fleetCredits[2], total[2])}),
  used = pair(used),
  tokens = pair({math.max(0, tok[1]), math.max(0, tok[2])}), -- credit is room, not use
  sec = int(sec), retry_ms = int(retryHint()), hold_ms = int(holdMs), left_ms = int(1000 - nowMs % 1000),
})
