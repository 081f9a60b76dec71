! Coarray operations timed on image 1, for the comparison of libcaf_firehose with
! OpenCoarrays (the same source linked against each; scripts/run-caf-bench.py runs
! them interleaved). Prints "name microseconds-per-operation" lines.
program bench_caf
  use iso_fortran_env, only: int64, lock_type, event_type, atomic_int_kind
  implicit none
  integer, parameter :: mib = 131072            ! 1 MiB of real(8)
  type :: holder
    real(8), allocatable :: v(:)
  end type
  real(8), allocatable :: buf(:)[:], wide(:)[:], loc(:)
  real(8) :: x[*], y, s
  type(holder) :: h[*]
  type(lock_type) :: lk[*]
  type(event_type) :: ping[*]
  integer(atomic_int_kind) :: counter[*]
  integer :: me, np, i, n
  integer(int64) :: t0

  me = this_image()
  np = num_images()
  allocate(buf(mib)[*], wide(2 * 65536)[*], loc(mib))
  allocate(h%v(mib))
  buf = me
  wide = 0
  loc = me
  h%v = me
  x = me
  counter = 0
  sync all

  n = 2000
  call start()
  do i = 1, n
    sync all
  end do
  call report('sync_all', n)

  n = 2000
  call start()
  do i = 1, n
    s = me
    call co_sum(s)
  end do
  call report('co_sum_8B', n)

  n = 20
  call start()
  do i = 1, n
    call co_sum(buf)
  end do
  call report('co_sum_1MiB', n)

  n = 20
  call start()
  do i = 1, n
    call co_broadcast(loc, 1)
  end do
  call report('co_broadcast_1MiB', n)

  n = 100000
  call start()
  if (me == 1) then
    do i = 1, n
      x[2] = i
    end do
  end if
  call report('put_8B', n)

  n = 100000
  call start()
  if (me == 1) then
    do i = 1, n
      y = x[2]
    end do
  end if
  call report('get_8B', n)

  n = 50
  call start()
  if (me == 1) then
    do i = 1, n
      buf(:)[2] = loc
    end do
  end if
  call report('put_1MiB', n)

  n = 50
  call start()
  if (me == 1) then
    do i = 1, n
      loc = buf(:)[2]
    end do
  end if
  call report('get_1MiB', n)

  n = 20
  call start()
  if (me == 1) then
    do i = 1, n
      wide(1:2 * 65536:2)[2] = loc(1:65536)
    end do
  end if
  call report('strided_put_64Ki', n)

  n = 20
  call start()
  if (me == 1) then
    do i = 1, n
      loc = h[2]%v
    end do
  end if
  call report('get_by_ref_1MiB', n)

  n = 2000
  call start()
  do i = 1, n
    call atomic_add(counter[1], 1)
  end do
  call report('atomic_add_all_to_1', n)

  n = 500
  call start()
  do i = 1, n
    lock(lk[1])
    unlock(lk[1])
  end do
  call report('lock_unlock_contended', n)

  n = 2000
  call start()
  do i = 1, n
    if (me == 1) then
      event post(ping[2])
      event wait(ping)
    else if (me == 2) then
      event wait(ping)
      event post(ping[1])
    end if
  end do
  call report('event_pingpong', n)

  if (me == 1 .and. y < 0) print *, y
contains
  subroutine start()
    sync all
    call system_clock(t0)
  end subroutine
  subroutine report(name, ops)
    character(*), intent(in) :: name
    integer, intent(in) :: ops
    integer(int64) :: t1, rate
    sync all
    call system_clock(t1, rate)
    if (me == 1) print '(a,1x,f0.3)', name, 1d6 * dble(t1 - t0) / dble(rate) / ops
  end subroutine
end program
