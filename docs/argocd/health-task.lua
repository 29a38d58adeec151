-- Argo CD health check for ordo Tasks (ordo.dev/v1alpha1, kind Task).
-- Install: resource.customizations.health.ordo.dev_Task in argocd-cm (docs/pipeline.md).
--   Healthy      the run succeeded (Complete=True, phase Succeeded)
--   Degraded     the run failed or was cancelled (Failed=True, phase Failed or Cancelled)
--   Progressing  not picked up yet, waiting for capacity (Scheduled=False), or running
-- Only status fields ordo writes are read; the message carries ordo's reason and its
-- sanitised message (never prompts, tool arguments or model output).
local hs = {}

local function condition(conditions, kind)
  if conditions == nil then
    return nil
  end
  for _, c in ipairs(conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function describe(prefix, reason, message)
  local text = prefix
  if reason ~= nil and reason ~= "" then
    text = text .. " (" .. reason .. ")"
  end
  if message ~= nil and message ~= "" then
    text = text .. ": " .. message
  end
  return text
end

local status = obj.status
if status == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the ordo operator to pick up the Task"
  return hs
end

local conditions = status.conditions
local phase = status.phase
local complete = condition(conditions, "Complete")
local failed = condition(conditions, "Failed")

if (complete ~= nil and complete.status == "True") or phase == "Succeeded" then
  hs.status = "Healthy"
  hs.message = describe("Succeeded", status.reason, status.message)
  return hs
end

if (failed ~= nil and failed.status == "True") or phase == "Failed" or phase == "Cancelled" then
  hs.status = "Degraded"
  hs.message = describe(phase or "Failed", status.reason or (failed and failed.reason), status.message or (failed and failed.message))
  return hs
end

if phase == "Running" then
  local text = "Running"
  if status.step ~= nil then
    text = text .. ", step " .. tostring(status.step)
  end
  hs.status = "Progressing"
  hs.message = text
  return hs
end

local scheduled = condition(conditions, "Scheduled")
hs.status = "Progressing"
if scheduled ~= nil and scheduled.status == "False" then
  hs.message = describe("Pending", scheduled.reason, scheduled.message)
else
  hs.message = "Pending"
end
return hs
