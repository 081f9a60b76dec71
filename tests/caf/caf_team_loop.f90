! FORM TEAM in a loop, as an iterative program re-forms its teams every step: 300
! iterations, the partition changing every 25 (halves, then thirds, ...), a nested
! team now and then. Each team value used to keep a library context of its own
! (tens of MiB per image), so such a loop ran out of memory within a few hundred
! iterations; a FORM TEAM with the partition of the last one now reuses that team.
program caf_team_loop
  use caf_check
  use iso_fortran_env, only: team_type
  implicit none
  type(team_type) :: part, sub
  integer :: me, np, it, k, color, s, want, j

  me = this_image()
  np = num_images()
  do it = 1, 300
    k = 2 + mod(it / 25, 2)
    color = 1 + mod(me - 1, k)
    form team(color, part)
    change team(part)
      call check(team_number() == color, 'TEAM_NUMBER in the loop')
      call check(num_images() == size([(j, j = color, np, k)]), 'NUM_IMAGES in the loop')
      s = me
      call co_sum(s)
      want = sum([(j, j = color, np, k)])
      call check(s == want, 'CO_SUM within the re-formed team')
      if (mod(it, 10) == 0) then
        form team(1, sub)
        change team(sub)
          s = 1
          call co_sum(s)
          call check(s == size([(j, j = color, np, k)]), 'nested team in the loop')
        end team
      end if
      sync all
    end team
  end do
  call check(num_images() == np .and. this_image() == me, 'back in the initial team')
  sync all
  if (me == 1) print '(a,i0,a)', 'caf_team_loop: ', np, ' images passed'
end program
