! LOCK / UNLOCK with ACQUIRED_LOCK and STAT, CRITICAL, EVENT POST / WAIT / EVENT_QUERY
! with many producers and one consumer, and every ATOMIC_* intrinsic.
program caf_sync
  use caf_check
  use iso_fortran_env, only: lock_type, event_type, atomic_int_kind, atomic_logical_kind, &
                             stat_locked, stat_unlocked, stat_locked_other_image
  implicit none
  type(lock_type) :: lk[*], locks(4)[*]
  type(event_type) :: ev[*], done(2)[*]
  integer :: counter[*], me, np, i, s, cnt, tries
  integer(atomic_int_kind) :: at[*], old, cmp
  logical(atomic_logical_kind) :: flag[*]
  logical :: got
  integer, parameter :: rounds = 20

  me = this_image()
  np = num_images()
  counter = 0
  at = 0
  flag = .false.
  sync all

  ! a counter on image 1 protected by the lock on image 1; half the rounds try first
  do i = 1, rounds
    if (mod(i, 2) == 0) then
      tries = 0
      do
        lock(lk[1], acquired_lock=got)
        tries = tries + 1
        if (got) exit
      end do
    else
      lock(lk[1])
    end if
    counter[1] = counter[1] + 1
    unlock(lk[1])
  end do
  sync all
  if (me == 1) call check(counter == rounds * np, 'lock-protected counter')

  ! STAT= codes: locking twice, unlocking what is not locked, or held by another image
  lock(locks(me)[1], stat=s)
  call check(s == 0, 'lock an element of a lock array')
  lock(locks(me)[1], stat=s)
  call check(s == stat_locked, 'STAT_LOCKED when locking twice')
  unlock(locks(me)[1], stat=s)
  call check(s == 0, 'unlock')
  unlock(locks(me)[1], stat=s)
  call check(s == stat_unlocked, 'STAT_UNLOCKED')
  sync all
  if (np >= 2) then
    if (me == 1) lock(locks(1)[2])
    sync all
    if (me == 2) then
      unlock(locks(1)[2], stat=s)
      call check(s == stat_locked_other_image, 'STAT_LOCKED_OTHER_IMAGE')
    end if
    sync all
    if (me == 1) unlock(locks(1)[2])
  end if

  ! CRITICAL
  do i = 1, rounds
    critical
      counter[1] = counter[1] + 1
    end critical
  end do
  sync all
  if (me == 1) call check(counter == 2 * rounds * np, 'critical counter')

  ! events: every image posts `rounds` times to image 1, which waits for them all
  do i = 1, rounds
    event post(ev[1])
  end do
  if (me == 1) then
    event wait(ev, until_count=rounds * np)
    call event_query(ev, cnt)
    call check(cnt == 0, 'event count consumed')
  end if
  ! ping-pong between images 1 and 2 with data handed over by the event
  if (np >= 2) then
    do i = 1, rounds
      if (me == 1) then
        counter[2] = i
        event post(done(1)[2])
        event wait(done(2))
      else if (me == 2) then
        event wait(done(1))
        call check(counter == i, 'data before the event')
        event post(done(2)[1])
      end if
    end do
  end if
  sync all

  ! atomics on image 1
  call atomic_add(at[1], 1)
  sync all
  if (me == 1) call check(at == np, 'ATOMIC_ADD')
  sync all
  call atomic_fetch_add(at[1], 2, old)
  call check(old >= np .and. mod(old - np, 2) == 0, 'ATOMIC_FETCH_ADD')
  sync all
  if (me == 1) then
    call check(at == 3 * np, 'after ATOMIC_FETCH_ADD')
    call atomic_define(at, 12)
    call atomic_and(at, 10)                 ! 8
    call atomic_or(at, 1)                   ! 9
    call atomic_xor(at, 3)                  ! 10
    call atomic_ref(old, at)
    call check(old == 10, 'ATOMIC_AND/OR/XOR/REF')
    call atomic_fetch_and(at, 6, old)       ! 10 -> 2
    call check(old == 10, 'ATOMIC_FETCH_AND')
    call atomic_fetch_or(at, 5, old)        ! 2 -> 7
    call check(old == 2, 'ATOMIC_FETCH_OR')
    call atomic_fetch_xor(at, 1, old)       ! 7 -> 6
    call check(old == 7, 'ATOMIC_FETCH_XOR')
    call atomic_define(at, 0)
  end if
  sync all
  ! every image tries to swing 0 -> its index; exactly one wins
  cmp = 0
  call atomic_cas(at[1], old, cmp, int(me, atomic_int_kind))
  sync all
  call atomic_ref(old, at[1])
  call check(old >= 1 .and. old <= np, 'ATOMIC_CAS winner')
  if (me == np) call atomic_define(flag[1], .true.)
  if (me == 1) then
    do
      call atomic_ref(got, flag)
      if (got) exit
    end do
  end if
  sync all
  if (me == 1) print '(a,i0,a)', 'caf_sync: ', np, ' images passed'
end program
