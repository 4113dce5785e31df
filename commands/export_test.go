package commands

import "time"

// The rules' internals that the external tests (package commands_test) check.
var Annotations = annotations
var CheckConcurrencyKey = checkConcurrencyKey
var CheckUniqueFields = checkUniqueFields
var CheckUser = checkUser

const CodeQueueTimeout = codeQueueTimeout

var ErrForbidden = errForbidden
var ErrInvalidCategory = errInvalidCategory
var ErrInvalidNamespace = errInvalidNamespace
var ErrInvalidTypeName = errInvalidTypeName

type FileNameError = fileNameError

var FindCycle = findCycle

const MaxPayloadBytes = maxPayloadBytes
const MaxPriority = maxPriority
const MaxProgressMessage = maxProgressMessage
const MaxUniqueFor = maxUniqueFor
const MinPriority = minPriority
const ReapQueueTimeout = reapQueueTimeout
const ReapStalled = reapStalled
const ReapTimeout = reapTimeout

var RetryDelay = retryDelay
var RetryLater = retryLater
var ScheduleJob = scheduleJob
var TickJitter = tickJitter

type Timetable = timetable

const DueSlack = dueSlack
const HoldAfter = holdAfter

var RateKeyOf = rateKey
var TimeOut = timeOut

func (a *Admission) Admitted(key string, now time.Time) int { return a.admittedIn(key, now) }
