-- Argo CD health check for GluesyncPlatform (gluesync.molo17.com), the resource of the Gluesync
-- Kubernetes Operator (GKO). Argo CD key: resource.customizations.health.gluesync.molo17.com_GluesyncPlatform
-- (deploy/argocd/argocd-cm.yaml carries this same script).
--
-- The GluesyncPlatform follows kstatus: status.observedGeneration, and the conditions Ready (the summary),
-- Reconciling and Stalled (both abnormal-true), each with its own observedGeneration. GKO keeps one
-- contract: whenever Ready is False, exactly one of Reconciling and Stalled is True. So this check,
-- kstatus (Flux, Helm 4 --wait) and `kubectl wait --for=condition=Ready` agree: Healthy exactly when Ready
-- is True for the latest generation of the spec.
--
-- The first rule that matches wins:
--   no status, or no conditions       Progressing  GKO has not reported yet
--   a generation GKO has not seen     Progressing  right after a sync changed the spec
--   Stalled=True                      Degraded     "<reason>: <message>": a failed, degraded or refused
--                                                  update, or a spec or install GKO cannot work on
--   Reconciling=True, reason          Suspended    "<reason>: <message>": an update waits for a person's
--     WaitingForApproval or                        approval or for a maintenance window, nothing paused
--     WaitingForMaintenanceWindow                  or changed (as Argo CD's own paused resources show)
--   Reconciling=True                  Progressing  "<reason>: <message>", and during an update
--                                                  "(<from> → <target>, step <step>)"
--   Ready=True                        Healthy      "Running <version> (update policy <policy>)", and
--                                                  "; Core Hub <available> available" when there is one
--   Ready=Unknown                     Progressing  the Ready message
--   Ready=False, neither of the above Degraded     "<reason>: <message>" (GKO never writes this)
--   no Ready condition                Progressing
--
-- Base Lua 5.1 only (ipairs, next, type, tostring, ..), so resource.customizations.useOpenLibs can stay
-- off. Every table is checked before it is read, so an unexpected shape never raises an error.

local function field(t, key)
  if type(t) == "table" then
    return t[key]
  end
  return nil
end

-- A non-empty string, or a number as text; nil for anything else.
local function text(value)
  if type(value) == "string" and value ~= "" then
    return value
  end
  if type(value) == "number" then
    return tostring(value)
  end
  return nil
end

-- "<reason>: <message>", or whichever of the two is there.
local function explain(c, fallback)
  local reason = text(field(c, "reason"))
  local message = text(field(c, "message"))
  if reason ~= nil and message ~= nil then
    return reason .. ": " .. message
  end
  return reason or message or fallback
end

local function condition(conditions, kind)
  for _, c in ipairs(conditions) do
    if field(c, "type") == kind then
      return c
    end
  end
  return nil
end

local function isTrue(c)
  return field(c, "status") == "True"
end

-- " (<from> → <target>, step <step>)" for an update in flight, " (step <step>)" when Core Hub stays.
local function progress(update)
  local step = text(field(update, "step"))
  if step == nil then
    return ""
  end
  local from = text(field(update, "from"))
  local target = text(field(update, "target"))
  if from ~= nil and target ~= nil and from ~= target then
    return " (" .. from .. " → " .. target .. ", step " .. step .. ")"
  end
  return " (step " .. step .. ")"
end

local hs = {}
local status = field(obj, "status")
local conditions = field(status, "conditions")
if type(conditions) ~= "table" or next(conditions) == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for gluesync-operator to report status"
  return hs
end

local ready = condition(conditions, "Ready")

-- A status that describes an older spec says nothing about the spec Argo CD just synced.
local generation = field(field(obj, "metadata"), "generation")
if type(generation) == "number" then
  local seen = field(status, "observedGeneration")
  local stale = type(seen) ~= "number" or seen < generation
  if not stale then
    local readySeen = field(ready, "observedGeneration")
    if type(readySeen) == "number" and readySeen < generation then
      stale = true
      seen = readySeen
    end
  end
  if stale then
    hs.status = "Progressing"
    hs.message = "Spec generation " .. tostring(generation) .. " not yet observed (observed "
      .. (text(seen) or "none") .. ")"
    return hs
  end
end

local stalled = condition(conditions, "Stalled")
if isTrue(stalled) then
  hs.status = "Degraded"
  hs.message = explain(stalled, "Stalled")
  return hs
end

local reconciling = condition(conditions, "Reconciling")
local waitingFor = text(field(reconciling, "reason"))
if isTrue(reconciling) and (waitingFor == "WaitingForApproval" or waitingFor == "WaitingForMaintenanceWindow") then
  hs.status = "Suspended"
  hs.message = explain(reconciling, "Reconciling")
  return hs
end
if isTrue(reconciling) then
  hs.status = "Progressing"
  hs.message = explain(reconciling, "Reconciling") .. progress(field(status, "update"))
  return hs
end

if ready == nil then
  hs.status = "Progressing"
  hs.message = "Ready condition not reported yet"
  return hs
end

if isTrue(ready) then
  local message = "Running " .. (text(field(status, "version")) or "an unknown version")
  local policy = text(field(field(obj, "spec"), "updatePolicy"))
  if policy ~= nil then
    message = message .. " (update policy " .. policy .. ")"
  end
  local available = text(field(status, "available"))
  if field(status, "phase") == "UpdateAvailable" and available ~= nil then
    message = message .. "; Core Hub " .. available .. " available"
  end
  hs.status = "Healthy"
  hs.message = message
  return hs
end

if field(ready, "status") == "False" then
  hs.status = "Degraded"
  hs.message = explain(ready, "Ready is False")
  return hs
end

-- Unknown, or a value no API server would accept: GKO has not made up its mind.
hs.status = "Progressing"
hs.message = text(field(ready, "message")) or text(field(ready, "reason")) or "Ready is Unknown"
return hs
