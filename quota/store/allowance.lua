-- allowance.lua: what every quota script counts a second's allowance by,
-- prepended to the two that count one (take.lua in redisstore.go, cap.lua
-- in capredis.go), so the formula
-- is written once in Lua as Allowance (limits.go) is in Go.
--
-- allowanceAt is floor((t+1)·r) − floor(t·r) with r = rpm/60 for second s;
-- periodic in t with period 60, so t = s mod 60 keeps every product exact.
local function allowanceAt(s, rpm)
  if rpm <= 0 then return 0 end
  local t = s % 60
  local a, b = (t + 1) * rpm, t * rpm
  return (a - math.fmod(a, 60)) / 60 - (b - math.fmod(b, 60)) / 60
end

