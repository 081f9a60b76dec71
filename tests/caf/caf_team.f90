! FORM TEAM / CHANGE TEAM / END TEAM / SYNC TEAM / TEAM_NUMBER: image indices,
! THIS_IMAGE and NUM_IMAGES follow the current team; collectives and coarray
! accesses inside a team; nested teams; a coarray allocated inside a team.
program caf_team
  use caf_check
  use iso_fortran_env, only: team_type
  implicit none
  type(team_type) :: halves, pairs
  integer :: me, np, color, nt, it, s, k, x[*]
  integer, allocatable :: y(:)[:]

  me = this_image()
  np = num_images()
  x = me
  color = 1 + mod(me - 1, 2)                 ! odd images: team 1, even: team 2
  call check(team_number() == -1, 'TEAM_NUMBER of the initial team')
  form team(color, halves)
  change team(halves)
    nt = num_images()
    it = this_image()
    call check(team_number() == color, 'TEAM_NUMBER inside CHANGE TEAM')
    call check(nt == (np + 2 - color) / 2, 'NUM_IMAGES of the team')
    call check(it == (me + 1) / 2, 'THIS_IMAGE in the team')
    ! team image 1 is world image `color`
    call check(x[1] == color, 'coindex relative to the team')
    s = me
    call co_sum(s)
    call check(s == sum([(k, k = color, np, 2)]), 'CO_SUM within the team')
    sync team(halves)
    allocate(y(4)[*])
    y = it
    sync all
    call check(y(2)[nt] == nt, 'coarray allocated inside the team')
    deallocate(y)
    ! a nested team: pairs within the half
    form team(1 + (it - 1) / 2, pairs)
    change team(pairs)
      s = 1
      call co_sum(s)
      call check(s == num_images() .and. num_images() <= 2, 'nested team')
    end team
  end team
  call check(num_images() == np .and. this_image() == me, 'back in the initial team')
  sync all
  if (me == 1) print '(a,i0,a)', 'caf_team: ', np, ' images passed'
end program
