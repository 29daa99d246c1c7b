-- budget.lua: spend budgets for a fleet, atomically (budgetredis.go).
--
-- KEYS (one {hash tag} for every budget, {prefix:budget}, so Redis
-- Cluster keeps them in one slot and a request's caller and class
-- budgets are reserved together):
--   1       alive    ZSET    replica -> expiry (ms): replicas that may hold
--                            reservations
--   2       settled  STRING  reservation id's marker (reserve and settle
--                            only): set by a settle that found nothing to
--                            settle, it makes a reserve of id that comes
--                            later change nothing; it expires with the
--                            budget periods
--   3..n+2  HASH     one budget period each: spent, reserved (nanodollars,
--                    integers); r:<id> -> the nanodollars reservation id
--                    holds; p:<id> -> what it held when it was reaped
--                    (charged in full), until its settle refunds it
-- ARGV[1]: one JSON object, budgetredis.go's budgetArgs (the names are its
-- json tags): op (reserve, settle, read, alive); force (reserve only: made
-- whatever the budgets have left, the reservation of a cost already
-- spent); id, the reservation (any
-- string unique to it; one of the form <replica>:<n> is reaped when that
-- replica goes silent); replica; cost; limits and expire_s, one per budget
-- key; ttl_ms, how long a silent replica's reservations stay
-- reservations; clock_ms, 0 in production (Redis TIME).
-- Amounts are below 2^53 (budgetredis.go clamps them), so Lua's doubles
-- hold them exactly.
-- Every call may be repeated, its first answer lost (a Redis that stalled
-- past the caller's timeout): a repeated reserve or settle changes
-- nothing.
-- Reply: one JSON object, budgetReply: outcome (0 reserved, 1 wait, 2
-- exceeded; budgetOutcome), refused (0-based index of the budget that
-- refused), use ([spent, reserved] per budget, as decimal strings). It is
-- written by hand (reply, below).

local a = cjson.decode(ARGV[1])
local kalive, ksettled, first = KEYS[1], KEYS[2], 3
local nowMs = a.clock_ms
if nowMs == 0 then
  local t = redis.call('TIME')
  nowMs = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function num(v) return tonumber(v or '0') or 0 end
local function str(n) return string.format('%.0f', n) end

local function use(k)
  local v = redis.call('HMGET', k, 'spent', 'reserved')
  return num(v[1]), num(v[2])
end

-- reply is the reply, written by hand: cjson writes an empty table (no
-- budget: alive) as {}, not [].
local function reply(outcome, refused)
  local uses = {}
  for i = first, #KEYS do
    local s, r = use(KEYS[i])
    uses[#uses + 1] = string.format('["%s","%s"]', str(s), str(r))
  end
  return string.format('{"outcome":%d,"refused":%d,"use":[%s]}', outcome, refused, table.concat(uses, ','))
end

if a.op == 'read' then return reply(0, 0) end

-- This replica is alive, and its reservations are reservations, until
-- ttl_ms from now.
redis.call('ZADD', kalive, nowMs + a.ttl_ms, a.replica)
redis.call('ZREMRANGEBYSCORE', kalive, '-inf', nowMs - 86400000) -- a day silent: long gone
redis.call('PEXPIRE', kalive, 86400000)
if a.op == 'alive' then return reply(0, 0) end

if a.op == 'settle' then
  local found, ttl = false, 0
  for i = first, #KEYS do
    local k, expire = KEYS[i], a.expire_s[i - first + 1]
    local held = redis.call('HGET', k, 'r:' .. a.id)
    local reaped = redis.call('HGET', k, 'p:' .. a.id)
    if held then
      redis.call('HDEL', k, 'r:' .. a.id)
      redis.call('HINCRBY', k, 'reserved', str(-num(held)))
      redis.call('HINCRBY', k, 'spent', str(a.cost))
    elseif reaped then
      -- Reaped (below): its replica was taken for gone and it was charged
      -- in full; give back what it held beyond its cost, once.
      redis.call('HDEL', k, 'p:' .. a.id)
      local d = math.max(a.cost - num(reaped), -num(redis.call('HGET', k, 'spent')))
      if d ~= 0 then redis.call('HINCRBY', k, 'spent', str(d)) end
    end
    if held or reaped then
      redis.call('EXPIRE', k, expire)
      found = true
    end
    ttl = math.max(ttl, expire)
  end
  -- Nothing to settle: settled already (this is a repeat), or never
  -- reserved — a reserve whose answer was lost, released here, that may
  -- still come (it was sent on another connection). It changes nothing,
  -- and the marker makes that reserve change nothing either.
  if not found and ttl > 0 then redis.call('SET', ksettled, '1', 'EX', ttl) end
  return reply(0, 0)
end

-- reserve. One released before it came (above) changes nothing; one that
-- comes again (its first answer lost) changes nothing and is reserved.
if redis.call('EXISTS', ksettled) == 1 then
  return redis.error_reply('budget.lua: reservation ' .. a.id .. ' was released before it was made')
end
for i = first, #KEYS do
  if redis.call('HEXISTS', KEYS[i], 'r:' .. a.id) == 1 or redis.call('HEXISTS', KEYS[i], 'p:' .. a.id) == 1 then
    return reply(0, 0)
  end
end

-- Each budget must hold cost beside what it spent (else exceeded) and
-- beside what others hold reserved (else wait).
local function judge()
  local outcome, refused = 0, 0
  for i = first, #KEYS do
    local s, r = use(KEYS[i])
    local lim = a.limits[i - first + 1]
    local o = 0
    if s + a.cost > lim then o = 2 elseif s + r + a.cost > lim then o = 1 end
    if o > outcome then outcome, refused = o, i - first end
  end
  return outcome, refused
end

local outcome, refused = 0, 0
if not a.force then outcome, refused = judge() end
if outcome ~= 0 then
  -- Before refusing or waiting: the reservations of replicas that stopped
  -- calling (killed, cut off) are charged in full — what their requests
  -- cost is unknown, and a budget is never overspent — and leave the
  -- reservations (p:<id> keeps what each held). A replica that comes
  -- back settles them with a refund.
  local reaped = false
  for i = first, #KEYS do
    local k = KEYS[i]
    local f = redis.call('HGETALL', k)
    for j = 1, #f, 2 do
      local rep = string.match(f[j], '^r:(.*):[^:]*$')
      if rep then
        local exp = redis.call('ZSCORE', kalive, rep)
        if not exp or tonumber(exp) < nowMs then
          local v = num(f[j + 1])
          redis.call('HDEL', k, f[j])
          redis.call('HSET', k, 'p:' .. string.sub(f[j], 3), f[j + 1])
          redis.call('HINCRBY', k, 'reserved', str(-v))
          redis.call('HINCRBY', k, 'spent', str(v))
          reaped = true
        end
      end
    end
  end
  if reaped then outcome, refused = judge() end
end
if outcome == 0 then
  for i = first, #KEYS do
    local k = KEYS[i]
    redis.call('HSET', k, 'r:' .. a.id, str(a.cost))
    redis.call('HINCRBY', k, 'reserved', str(a.cost))
    redis.call('EXPIRE', k, a.expire_s[i - first + 1])
  end
end
return reply(outcome, refused)
